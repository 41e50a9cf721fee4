"""The ``lattice`` command: one-shot prompts and an interactive chat.

::

    lattice "Summarise RFC 2119 in one line."     # one-shot: streams the reply, exits
    lattice chat --session notes.jsonl            # interactive; resumes notes.jsonl
    lattice --mock "hello"                        # offline, against a local mock server

Ctrl-C during a reply interrupts it (``Agent.interrupt()``) and returns to the prompt; the
conversation keeps every completed turn. Ctrl-C while waiting for input, a second Ctrl-C
during the same reply, ``/exit`` or end of input quit. In a chat, lines that start with
``/`` are commands (``/help`` lists them), never sent to the model.

``--session`` is checked before anything is sent: a path that cannot be written is a usage
error naming it. If the file fails later, the error is reported and lattice exits 1 (the
conversation is never silently kept in memory only).

Exit status: 0 done, 1 the query failed (an API error or an error result), 2 a usage
problem (bad option, no API key), 130 quit by Ctrl-C (or a one-shot prompt interrupted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
from types import FrameType
from typing import Any, Callable, Dict, List, Optional, TextIO

from ._version import __version__
from .agent import Agent
from .errors import HistoryStoreError, LatticeError
from .messages import AssistantMessage, ResultMessage, StreamEvent
from .stores import create_jsonl_history_store

__all__ = ["main"]

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

NO_KEY = """\
lattice: no API key. Set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN for a bearer token):

    export ANTHROPIC_API_KEY=sk-ant-...

A provider behind --base-url that needs no key still wants a placeholder value there.
To try lattice offline, add --mock.
"""

CHAT_HELP = """\
commands:
  /help          this list
  /exit, /quit   leave (end of input and Ctrl-C while waiting for input do too)
  //text         send "/text" as a prompt
Ctrl-C during a reply interrupts it; the conversation keeps every completed turn.
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
               "from stdin.")
    parser.add_argument("words", nargs="*", metavar="PROMPT",
                        help="the prompt (several words are joined), or 'chat'")
    parser.add_argument("--model", help=f"model name (default: $LATTICE_MODEL, else "
                        f"{DEFAULT_MODEL}, or {DEFAULT_OPENAI_MODEL} with --provider openai)")
    parser.add_argument("--system", help="system prompt")
    parser.add_argument("--session", metavar="FILE.jsonl",
                        help="keep the conversation in this JSONL file and resume from it")
    parser.add_argument("--max-turns", metavar="N", help="model requests per prompt (50)")
    parser.add_argument("--timeout-ms", metavar="MS", help="deadline of each model request")
    parser.add_argument("--provider", choices=("anthropic", "openai"),
                        default=os.environ.get("LATTICE_PROVIDER") or "anthropic",
                        help="API to speak: the Anthropic Messages API or OpenAI-compatible "
                        "Chat Completions (default: $LATTICE_PROVIDER or %(default)s)")
    parser.add_argument("--base-url", help="API base URL (default: $ANTHROPIC_BASE_URL or "
                        "https://api.anthropic.com; with --provider openai, "
                        "$OPENAI_BASE_URL or https://api.openai.com/v1)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="after each answer, print its token usage and cache hits to stderr")
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


def _mock_reply(delay: float) -> Any:
    """The offline model: echoes the prompt, counting the prompts it was sent, which shows
    that a resumed ``--session`` sends the whole conversation."""
    from .testing import MockMessagesServer

    def reply(body: Dict[str, Any]) -> Any:
        prompts = [m["content"] for m in body.get("messages", [])
                   if m.get("role") == "user" and isinstance(m.get("content"), str)]
        last = prompts[-1] if prompts else ""
        text = (f"(mock) You said: {last!r}. That is prompt {len(prompts)} of this "
                f"conversation. Drop --mock and set ANTHROPIC_API_KEY to talk to "
                f"{body.get('model')}.")
        return MockMessagesServer.delay(delay, text) if delay > 0 else text

    return reply


class _Printer:
    """Writes replies to ``out`` as their text streams in."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.streamed = False  # text of the current reply arrived as deltas
        self.last = "\n"

    def write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self.last = text[-1]

    def event(self, event: Dict[str, Any]) -> None:
        delta = event.get("delta") if event.get("type") == "content_block_delta" else None
        if isinstance(delta, dict) and delta.get("type") == "text_delta":
            self.streamed = True
            self.write(str(delta.get("text", "")))
        elif event.get("object") == "chat.completion.chunk":  # --provider openai
            for choice in event.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if isinstance(text, str):
                    self.streamed = True
                    self.write(text)

    def reply(self, message: AssistantMessage) -> None:
        if not self.streamed:  # a provider that does not stream: print it whole
            self.write(message.text)
        self.streamed = False

    def end_line(self) -> None:
        if self.last != "\n":
            self.write("\n")


class _Session:
    """One Agent and the Ctrl-C policy around its turns."""

    def __init__(self, agent: Agent, *, as_json: bool, out: TextIO, err: TextIO,
                 before_turn: Optional[Callable[[], None]] = None,
                 verbose: bool = False) -> None:
        self.agent = agent
        self.as_json = as_json
        self.verbose = verbose
        self.before_turn = before_turn
        self.out = out
        self.err = err
        self.busy = False
        self.interrupting = False
        self.store_failed = False  # the --session file failed: the chat must stop

    def on_sigint(self, signum: int, frame: Optional[FrameType]) -> None:
        if not self.busy or self.interrupting:
            raise KeyboardInterrupt
        self.interrupting = True
        # Not agent.interrupt() here: a handler runs on the main thread between two
        # bytecodes, maybe in the middle of the consumer's own critical section; a helper
        # thread keeps the handler trivially safe.
        threading.Thread(target=self.agent.interrupt, name="lattice-cli-interrupt",
                         daemon=True).start()

    def turn(self, prompt: str) -> int:
        """Run one prompt, printing as it goes; returns the exit status it deserves."""
        if self.before_turn is not None:
            self.before_turn()
        self.busy, self.interrupting = True, False
        try:
            return self._report(self._run(prompt))
        except HistoryStoreError as exc:
            self.store_failed = True
            self.err.write(f"error: {_store_failure(exc)}\n")
            return EXIT_FAILED
        except LatticeError as exc:
            self.err.write(f"error: {type(exc).__name__}: {exc}\n")
            return EXIT_FAILED
        except ImportError as exc:  # a vendored copy without requests, say
            self.err.write(f"error: {type(exc).__name__}: {exc} (the built-in client "
                           "needs the requests package: pip install requests)\n")
            return EXIT_FAILED
        finally:
            self.busy = False

    def _run(self, prompt: str) -> ResultMessage:
        printer = _Printer(self.out)
        result: Optional[ResultMessage] = None
        messages = self.agent.query(prompt)
        try:
            for message in messages:
                if isinstance(message, ResultMessage):
                    result = message
                elif self.as_json:
                    continue
                elif isinstance(message, StreamEvent):
                    printer.event(message.event)
                elif isinstance(message, AssistantMessage):
                    printer.reply(message)
        finally:
            # A second Ctrl-C leaves the generator suspended: closing it ends the query
            # now, with its history repaired, instead of whenever it is collected.
            getattr(messages, "close", lambda: None)()
            printer.end_line()
        assert result is not None, "query() always ends with a ResultMessage"
        return result

    def _report(self, result: ResultMessage) -> int:
        if self.verbose:
            self.err.write(usage_line(result) + "\n")
        if self.as_json:
            self.out.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
            self.out.flush()
        if result.subtype == "interrupted":
            self.err.write("(interrupted)\n")
            return EXIT_INTERRUPTED
        if result.is_error:
            if not self.as_json:
                why = (f"{type(result.error).__name__}: {result.error}" if result.error
                       else f"stopped after {result.num_turns} model requests")
                self.err.write(f"error: {result.subtype}: {why}\n")
            return EXIT_FAILED
        return EXIT_OK


def usage_line(result: ResultMessage) -> str:
    """``--verbose``: what an answer cost, cache hits included."""
    u = result.usage
    prompt = u.prompt_tokens
    hit = f" ({100 * u.cache_read_input_tokens // prompt}% from cache)" if prompt else ""
    turns = "1 request" if result.num_turns == 1 else f"{result.num_turns} requests"
    return (f"[usage] {u.input_tokens} in + {u.cache_read_input_tokens} cache read + "
            f"{u.cache_creation_input_tokens} cache write, {u.output_tokens} out{hit}; "
            f"{turns}, {result.duration_ms} ms")


def _read_line(interactive: bool) -> Optional[str]:
    """The next line of input, or None at its end."""
    if interactive:
        try:
            return input("> ")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


def _chat(session: _Session, *, banner: str) -> int:
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 - line editing and history for input()
    session.err.write(banner)
    session.err.flush()
    status = EXIT_OK
    while True:
        line = _read_line(interactive)
        if line is None:
            break
        prompt = line.strip()
        if prompt.startswith("/") and not prompt.startswith("//"):
            command = prompt.split()[0]
            if command in ("/exit", "/quit"):
                break
            session.err.write(CHAT_HELP if command == "/help" else
                              f"unknown command {command}: /help lists the commands "
                              f"(start the line with // to send it as a prompt)\n")
            session.err.flush()
            continue
        if prompt:
            outcome = session.turn(prompt[1:] if prompt.startswith("//") else prompt)
            if outcome == EXIT_FAILED:
                status = EXIT_FAILED  # keep chatting; report it at the end
            if session.store_failed:
                break  # without its file the conversation would be lost on exit
    if interactive:
        session.err.write("\n")
    return status


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
        from .models.openai import OpenAIChatClient

        try:
            options["model_client"] = OpenAIChatClient(options.pop("api_key"),
                                                       options.pop("base_url"))
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


def _main(parser: argparse.ArgumentParser, argv: Optional[List[str]]) -> int:
    args = parser.parse_args(argv)
    if args.provider not in ("anthropic", "openai"):  # from $LATTICE_PROVIDER
        parser.error(f"LATTICE_PROVIDER must be anthropic or openai, got {args.provider!r}")
    args.model = args.model or os.environ.get("LATTICE_MODEL") or (
        DEFAULT_OPENAI_MODEL if args.provider == "openai" else DEFAULT_MODEL)
    chat = args.words == ["chat"]
    if args.words == ["-"]:
        prompt = sys.stdin.read().strip()
    else:
        prompt = " ".join(args.words).strip()
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
    if args.provider == "openai":
        # A local server (--base-url, $OPENAI_BASE_URL) needs no key; api.openai.com does.
        keyless = args.base_url or os.environ.get("OPENAI_BASE_URL")
        if not args.mock and not keyless and not os.environ.get("OPENAI_API_KEY"):
            sys.stderr.write(NO_OPENAI_KEY)
            return EXIT_USAGE
    elif not args.mock and not (os.environ.get("ANTHROPIC_API_KEY")
                                or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        sys.stderr.write(NO_KEY)
        return EXIT_USAGE

    with contextlib.ExitStack() as stack:
        base_url, api_key = args.base_url, None
        before_turn: Optional[Callable[[], None]] = None
        if args.mock:
            from .testing import MockMessagesServer

            server = stack.enter_context(MockMessagesServer())
            base_url, api_key = server.base_url, "offline-mock-key"
            reply = _mock_reply(delay)
            # One scripted reply per prompt: the CLI has no tools, so a prompt is one request.
            before_turn = lambda: server.add(reply)  # noqa: E731
        agent = _build_agent(parser, args, base_url=base_url, api_key=api_key,
                             max_turns=max_turns, timeout_ms=timeout_ms)
        session = _Session(agent, as_json=args.json, out=sys.stdout, err=sys.stderr,
                           verbose=args.verbose,
                           before_turn=before_turn)
        _install_sigint(stack, session)
        if not chat:
            return session.turn(prompt)
        try:
            resumed = len(agent.get_history()) if args.session else 0
        except HistoryStoreError as exc:
            sys.stderr.write(f"error: {_store_failure(exc)}\n")
            return EXIT_FAILED
        banner = (f"lattice chat · {args.model}{' (offline mock)' if args.mock else ''} · "
                  "/help · /exit or Ctrl-D quits · Ctrl-C interrupts a reply\n")
        if resumed:
            banner += f"(resumed {resumed} messages from {args.session})\n"
        return _chat(session, banner=banner)


def _session_problem(path: str) -> Optional[str]:
    """Why ``--session path`` cannot hold the conversation (None if it can). Probes by
    opening the file for reading and appending, and a scratch file beside it (the store
    keeps a lock file there); leaves no new file behind."""
    target = os.path.abspath(path)
    if os.path.isdir(target):
        return "is a directory, not a file"
    directory = ancestor = os.path.dirname(target)
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        return f"cannot be created: {ancestor} is not a directory"
    try:
        os.makedirs(directory, exist_ok=True)
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


def _store_failure(exc: HistoryStoreError) -> str:
    cause = exc.__cause__
    why = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
    return f"the session file failed, so lattice stops here: {why}"


def _install_sigint(stack: contextlib.ExitStack, session: _Session) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # main() called from a thread: signals are the host's business
    previous = signal.signal(signal.SIGINT, session.on_sigint)
    stack.callback(signal.signal, signal.SIGINT, previous)
