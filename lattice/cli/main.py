"""The ``lattice`` command: one-shot prompts and an interactive chat.

::

    lattice "Summarise RFC 2119 in one line."     # one-shot: streams the reply, exits
    lattice chat --session notes.jsonl            # interactive; resumes notes.jsonl
    lattice --mock "hello"                        # offline, against a local mock server
    lattice runs --session notes.jsonl [RUN_ID]   # the durable runs the file records

Ctrl-C during a reply interrupts it (``Agent.interrupt()``) and returns to the prompt; the
conversation keeps every completed turn. Ctrl-C while waiting for input, a second Ctrl-C
during the same reply, ``/exit`` or end of input quit. In a chat, lines that start with
``/`` are commands (``/help`` lists them), never sent to the model.

``--session`` is checked before anything is sent: a path that cannot be written, or whose
folder does not exist (it is never created), is a usage error naming it. So are an empty
``--model`` or ``--base-url``, a base URL that is not one (a port out of range), and an
``AWS_REGION`` that is not a region name: one line each, never a traceback. If the
session file fails later, the error is reported and lattice exits 1 (the
conversation is never silently kept in memory only).

Exit status: 0 done, 1 the query failed (an API error or an error result), 2 a usage
problem (bad option, no API key), 130 quit by Ctrl-C (or a one-shot prompt interrupted).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import tempfile
import threading
import urllib.parse
from typing import Any, Dict, List, Optional

from .._version import __version__
from ..agent import Agent
from ..errors import HistoryStoreError
from ..stores import create_jsonl_history_store
from .cloud import DEFAULT_MODELS as CLOUD_MODELS
from .cloud import PROVIDERS as CLOUD_PROVIDERS
from .cloud import REAL_KEY as CLOUD_KEYS
from .cloud import make_client as make_cloud_client
from .cloud import missing_credentials as missing_cloud_credentials
from .openai import PROVIDERS as OPENAI_PROVIDERS
from .openai import REAL_KEY as OPENAI_KEYS
from .openai import make_client as make_openai_client
from .openai import missing_credentials
from .runs import show_runs
from .session import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Session,
    run_chat,
    store_failure,
    usage_line,
)

__all__ = ["main", "usage_line"]

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"

NO_KEY = """\
lattice: no API key. Set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN for a bearer token):

    export ANTHROPIC_API_KEY=sk-ant-...

A provider behind --base-url that needs no key still wants a placeholder value there.
To try lattice offline, add --mock.
"""

NO_OPENAI_KEY = """\
lattice: no API key for api.openai.com. Set OPENAI_API_KEY:

    export OPENAI_API_KEY=sk-...

A local server (Ollama, vLLM, llama.cpp) needs no key: give --base-url, e.g.
--base-url http://localhost:11434/v1. To try lattice offline, add --mock.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lattice",
        description="Talk to a model through the lattice agent loop.",
        epilog="'lattice chat' starts an interactive chat; 'lattice -' reads the prompt "
               "from stdin; 'lattice runs --session FILE [RUN_ID]' lists a session's durable "
               "runs, or shows one.")
    parser.add_argument("words", nargs="*", metavar="PROMPT",
                        help="the prompt (several words are joined), or 'chat'")
    parser.add_argument("--model", help=f"model name (default: $LATTICE_MODEL, else "
                        f"{DEFAULT_MODEL}, or {DEFAULT_OPENAI_MODEL} with --provider openai)")
    parser.add_argument("--system", help="system prompt")
    parser.add_argument("--session", metavar="FILE.jsonl",
                        help="keep the conversation in this JSONL file and resume from it")
    parser.add_argument("--max-turns", metavar="N", help="model requests per prompt (50)")
    parser.add_argument("--timeout-ms", metavar="MS", help="deadline of each model request")
    parser.add_argument("--provider",
                        choices=("anthropic", "openai") + OPENAI_PROVIDERS + CLOUD_PROVIDERS,
                        default=os.environ.get("LATTICE_PROVIDER") or "anthropic",
                        help="API to speak: the Anthropic Messages API, OpenAI-compatible "
                        "Chat Completions, OpenAI's Responses API, Azure OpenAI, Claude on "
                        "AWS Bedrock or Google Vertex AI, or Gemini (the Gemini API or "
                        "Vertex AI) (default: "
                        "$LATTICE_PROVIDER or %(default)s)")
    parser.add_argument("--base-url", help="API base URL (default: $ANTHROPIC_BASE_URL or "
                        "https://api.anthropic.com; with --provider openai, "
                        "$OPENAI_BASE_URL or https://api.openai.com/v1)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="after each answer, print its token usage, cache hits and cost in US "
                        "dollars (list prices) to stderr")
    parser.add_argument("--json", action="store_true",
                        help="print each ResultMessage as JSON instead of streaming text")
    parser.add_argument("--mock", action="store_true",
                        help="run offline against a local mock server that echoes you")
    # For tests of Ctrl-C: the mock waits this long before every reply.
    parser.add_argument("--mock-delay", metavar="SECONDS", help=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"lattice {__version__}")
    return parser


def _positive_int(parser: argparse.ArgumentParser, option: str,
                  text: Optional[str]) -> Optional[int]:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        parser.error(f"{option} must be a positive integer, got {text!r}")
    return value


# What to set instead of --mock, per provider (the mock's reply says it).
REAL_KEY = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", **OPENAI_KEYS,
            **CLOUD_KEYS}


def _mock_reply(delay: float, provider: str = "anthropic") -> Any:
    """The offline model: echoes the prompt, counting the prompts it was sent, which shows
    that a resumed ``--session`` sends the whole conversation."""
    from ..testing import MockMessagesServer

    how = f"set {REAL_KEY[provider]}" if provider in REAL_KEY else "give your credentials"

    def reply(body: Dict[str, Any]) -> Any:
        prompts = [m["content"] for m in body.get("messages", [])
                   if m.get("role") == "user" and isinstance(m.get("content"), str)]
        last = prompts[-1] if prompts else ""
        text = (f"(mock) You said: {last!r}. That is prompt {len(prompts)} of this "
                f"conversation. Drop --mock and {how} to talk to "
                f"{body.get('model')}.")
        return MockMessagesServer.delay(delay, text) if delay > 0 else text

    return reply


def _build_agent(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                 base_url: Optional[str], api_key: Optional[str], max_turns: Optional[int],
                 timeout_ms: Optional[int]) -> Agent:
    options: Dict[str, Any] = {
        "model": args.model, "system": args.system, "base_url": base_url,
        "api_key": api_key, "include_partial_messages": not args.json,
        "request_timeout_ms": timeout_ms,
    }
    if max_turns is not None:
        options["max_turns"] = max_turns
    if args.provider == "openai":
        from ..models.openai import OpenAIChatClient

        try:
            options["model_client"] = OpenAIChatClient(options.pop("api_key"),
                                                       options.pop("base_url"))
        except ValueError as exc:
            parser.error(str(exc))
    elif args.provider in CLOUD_PROVIDERS:
        options.pop("api_key")
        try:
            options["model_client"] = make_cloud_client(
                args.provider, base_url=options.pop("base_url"), mock=args.mock)
        except ValueError as exc:
            parser.error(str(exc))
    elif args.provider in OPENAI_PROVIDERS:
        try:
            options["model_client"] = make_openai_client(
                args.provider, model=args.model, api_key=options.pop("api_key"),
                base_url=options.pop("base_url"))
        except ValueError as exc:
            parser.error(str(exc))
    if args.session:  # fail_on_error: a failing file is reported, not silently dropped
        options["history_store"] = create_jsonl_history_store(args.session,
                                                              fail_on_error=True)
    try:
        return Agent(**options)
    except ValueError as exc:  # e.g. a base URL that is not http(s)
        parser.error(str(exc))
        raise  # parser.error exits; this keeps type checkers content


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    try:
        return _main(parser, argv)
    except SystemExit as exc:  # argparse: --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return EXIT_INTERRUPTED
    except ImportError as exc:  # a package the chosen client needs: one line, not a traceback
        sys.stderr.write(f"lattice: {exc}\n")
        return EXIT_USAGE
    except ValueError as exc:  # a setting found bad only when used: one line, not a traceback
        sys.stderr.write(f"lattice: {exc}\n")
        return EXIT_USAGE


def _main(parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> int:
    # intermixed: 'lattice runs --session FILE RUN_ID' has words on both sides of an option
    args = parser.parse_intermixed_args(argv)
    if args.words[:1] == ["runs"]:
        if not args.session:
            parser.error("'lattice runs' needs --session FILE.jsonl")
        return show_runs(args.session, args.words[1:], as_json=args.json, out=sys.stdout,
                         err=sys.stderr)
    _check_given(parser, args)
    if args.provider not in ("anthropic", "openai") + OPENAI_PROVIDERS + CLOUD_PROVIDERS:
        parser.error("LATTICE_PROVIDER must be anthropic, openai, openai-responses, azure, "
                     f"bedrock, vertex, gemini or vertex-gemini, got {args.provider!r}")
    args.model = args.model or os.environ.get("LATTICE_MODEL") or (
        os.environ.get("AZURE_OPENAI_DEPLOYMENT") if args.provider == "azure" else None) or (
        CLOUD_MODELS.get(args.provider)) or (
        DEFAULT_OPENAI_MODEL if args.provider != "anthropic" else DEFAULT_MODEL)
    chat = args.words == ["chat"]
    prompt = _prompt(parser, args.words)
    if not chat and not prompt:
        parser.error("give a prompt (lattice \"...\"), 'chat', or '-' to read stdin")
    delay = 0.0
    if args.mock_delay is not None:
        try:
            delay = float(args.mock_delay)
        except ValueError:
            parser.error(f"--mock-delay must be a number of seconds, got {args.mock_delay!r}")
    if args.mock and args.base_url:
        parser.error("--mock runs its own server: leave out --base-url")
    max_turns = _positive_int(parser, "--max-turns", args.max_turns)
    timeout_ms = _positive_int(parser, "--timeout-ms", args.timeout_ms)
    problem = _session_problem(args.session) if args.session else None
    if problem is not None:
        sys.stderr.write(f"lattice: --session {args.session}: {problem}\n")
        return EXIT_USAGE
    missing = None if args.mock else _missing_credentials(args)
    if missing is not None:
        sys.stderr.write(missing)
        return EXIT_USAGE

    with contextlib.ExitStack() as stack:
        base_url, api_key = args.base_url, None
        if args.mock:
            from ..testing import MockMessagesServer

            server = stack.enter_context(MockMessagesServer(
                [_mock_reply(delay, args.provider)], repeat=True))
            base_url, api_key = server.base_url, "offline-mock-key"
        agent = _build_agent(parser, args, base_url=base_url, api_key=api_key,
                             max_turns=max_turns, timeout_ms=timeout_ms)
        session = Session(agent, as_json=args.json, out=sys.stdout, err=sys.stderr,
                           verbose=args.verbose)
        _install_sigint(stack, session)
        if not chat:
            return session.turn(prompt)
        try:
            resumed = len(agent.get_history()) if args.session else 0
        except HistoryStoreError as exc:
            sys.stderr.write(f"error: {store_failure(exc)}\n")
            return EXIT_FAILED
        banner = (f"lattice chat · {args.model}{' (offline mock)' if args.mock else ''} · "
                  "/help · /exit or Ctrl-D quits · Ctrl-C interrupts a reply\n")
        if resumed:
            banner += f"(resumed {resumed} messages from {args.session})\n"
        return run_chat(session, banner=banner)


_REGION = re.compile(r"[A-Za-z0-9]+(-[A-Za-z0-9]+)*\Z")  # letters, digits, dashes


def _check_given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options given but empty or malformed are usage errors, never defaults."""
    if args.model is not None and not args.model.strip():
        parser.error("--model must name a model, got ''")
    if args.base_url is not None:
        if not args.base_url.strip():
            parser.error("--base-url must be a URL, got '' (leave it out for the default)")
        try:
            urllib.parse.urlsplit(args.base_url).port  # noqa: B018 - raises when out of range
        except ValueError as exc:
            parser.error(f"--base-url {args.base_url!r} is not a usable URL: {exc}")
    if args.provider == "bedrock":
        for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            region = os.environ.get(name)
            if region and not _REGION.match(region):
                parser.error(f"{name} must be a region name like us-east-1, got {region!r}")


def _prompt(parser: argparse.ArgumentParser, words: List[str]) -> str:
    """The prompt: the words, or stdin for ``-``."""
    if words != ["-"]:
        return " ".join(words).strip()
    prompt = sys.stdin.read().strip()
    if not prompt:
        parser.error("'-' reads the prompt from stdin, and stdin held no text")
    return prompt


def _missing_credentials(args: argparse.Namespace) -> Optional[str]:
    """What to say when the provider's credentials are missing (None: they are there)."""
    if args.provider == "openai":
        # A local server (--base-url, $OPENAI_BASE_URL) needs no key; api.openai.com does.
        keyless = args.base_url or os.environ.get("OPENAI_BASE_URL")
        return None if keyless or os.environ.get("OPENAI_API_KEY") else NO_OPENAI_KEY
    if args.provider in CLOUD_PROVIDERS:
        return missing_cloud_credentials(args.provider)
    if args.provider in OPENAI_PROVIDERS:
        return missing_credentials(args.provider, args.base_url)
    if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        return None
    return NO_KEY


def _session_problem(path: str) -> Optional[str]:
    """Why ``--session path`` cannot hold the conversation (None if it can). Probes by
    opening the file for reading and appending, and a scratch file beside it (the store
    keeps a lock file there); leaves no new file behind."""
    target = os.path.abspath(path)
    if os.path.isdir(target):
        return "is a directory, not a file"
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.exists(directory) else "does not exist"
        return f"its folder {directory} {what} (lattice does not create folders)"
    try:
        existed = os.path.exists(target)
        with open(target, "a+b"):
            pass
        if not existed and os.path.getsize(target) == 0:
            os.remove(target)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return f"cannot be written: {exc.strerror or exc}"
    return None


def _install_sigint(stack: contextlib.ExitStack, session: Session) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # main() called from a thread: signals are the host's business
    previous = signal.signal(signal.SIGINT, session.on_sigint)
    stack.callback(signal.signal, signal.SIGINT, previous)
