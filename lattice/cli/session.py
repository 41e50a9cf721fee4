"""The command line's turns: a reply printed as it streams, Ctrl-C interrupting the turn,
the chat loop and its ``/`` commands, and what ``--verbose`` prints (``main.py`` parses the
options and builds the Agent)."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from types import FrameType
from typing import Any, Callable, Dict, Optional, TextIO

from ..agent import Agent
from ..errors import HistoryStoreError, LatticeError
from ..messages import AssistantMessage, ResultMessage, StreamEvent

__all__ = ["Session", "run_chat", "usage_line", "cost_line", "store_failure", "EXIT_OK",
           "EXIT_FAILED",
           "EXIT_USAGE", "EXIT_INTERRUPTED"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

CHAT_HELP = """\
commands:
  /help          this list
  /exit, /quit   leave (end of input and Ctrl-C while waiting for input do too)
  //text         send "/text" as a prompt
Ctrl-C during a reply interrupts it; the conversation keeps every completed turn.
"""


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


class Session:
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
        self.spent: Optional[float] = 0.0  # USD of this run's answers (None: unknown)

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
            self.err.write(f"error: {store_failure(exc)}\n")
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
        cost = result.total_cost_usd
        self.spent = None if cost is None or self.spent is None else self.spent + cost
        if self.verbose:
            self.err.write(usage_line(result) + "\n")
            self.err.write(cost_line(cost, self.spent) + "\n")
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


def cost_line(cost: Optional[float], spent: Optional[float]) -> str:
    """``--verbose``: what an answer cost in US dollars, and the run so far (list prices
    from ``lattice/prices.json``; "unknown" for a model it does not price)."""
    def dollars(value: Optional[float]) -> str:
        return "unknown" if value is None else f"${value:.6f}"

    return f"[cost] {dollars(cost)} this answer, {dollars(spent)} this run"


def read_line(interactive: bool) -> Optional[str]:
    """The next line of input, or None at its end."""
    if interactive:
        try:
            return input("> ")
        except EOFError:
            return None
    line = sys.stdin.readline()
    return line if line else None


def run_chat(session: Session, *, banner: str) -> int:
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 - line editing and history for input()
    session.err.write(banner)
    session.err.flush()
    status = EXIT_OK
    while True:
        line = read_line(interactive)
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


def store_failure(exc: HistoryStoreError) -> str:
    cause = exc.__cause__
    why = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
    return f"the session file failed, so lattice stops here: {why}"
