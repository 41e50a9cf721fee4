"""``Agent``: one conversation. Options, the one-query-at-a-time guard, and the consumer
side of a query (the loop itself is in ``loop.py``, the race in ``race.py``)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

from . import compaction
from .cancellation import SignalLike, as_signal
from .errors import ConcurrentQueryError
from .loop import Loop
from .messages import ResultMessage, UserMessage, tool_result, unanswered_tool_uses
from .models.base import ModelClient, ModelRequest, as_model_client
from .output import SUBMIT_OUTPUT_TOOL_NAME, OutputSchema, resolve_output_schema
from .race import End, QueryRun
from .tools import Tool, as_tool, flatten_tools

__all__ = ["Agent", "create_agent", "QuerySettings"]

log = logging.getLogger("lattice")
_UNSET: Any = object()

WHY_NOT_ANSWERED = {
    "abort": "the query was aborted",
    "timeout": "the model request timed out",
    "interrupt": "the query was interrupted",
    "closed": "the caller stopped the query",
    "error": "the query failed",
}


def _positive_int(name: str, value: Any, *, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


@dataclass
class QuerySettings:
    """Everything one query runs with (Agent options plus per-query overrides)."""

    model: Optional[str]
    client: ModelClient
    system: Any
    tools: Dict[str, Tool]
    tool_definitions: List[Dict[str, Any]]
    max_turns: int
    max_tokens: int
    request_timeout_ms: Optional[int]
    auto_compact: Optional[compaction.AutoCompact]
    output: Optional[OutputSchema]
    max_output_retries: Optional[int]
    on_model_request: Optional[Callable[[ModelRequest], Optional[ModelRequest]]]
    include_partial_messages: bool
    parallel_tool_calls: bool
    extra: Dict[str, Any] = field(default_factory=dict)


class Agent:
    """One conversation with a model that can call tools.

    Keyword-only options (SPEC section 2): ``model``, ``api_key``, ``base_url``,
    ``model_client``, ``system``, ``tools``, ``max_turns`` (50), ``max_tokens`` (8192),
    ``request_timeout_ms``, ``auto_compact``, ``history_store``, ``output_schema``,
    ``max_output_retries``, ``on_model_request``, ``include_partial_messages``,
    ``parallel_tool_calls``, ``extra`` (more request body fields, e.g. temperature).
    """

    def __init__(self, *, model: Optional[str] = None, api_key: Optional[str] = None,
                 base_url: Optional[str] = None, model_client: Any = None, system: Any = None,
                 tools: Optional[Iterable[Any]] = None, max_turns: int = 50,
                 max_tokens: int = 8192, request_timeout_ms: Optional[int] = None,
                 auto_compact: Any = False, history_store: Any = None,
                 output_schema: Any = None, max_output_retries: Optional[int] = None,
                 on_model_request: Optional[Callable[[ModelRequest], Any]] = None,
                 include_partial_messages: bool = False, parallel_tool_calls: bool = False,
                 extra: Optional[Dict[str, Any]] = None) -> None:
        if model is not None and (not isinstance(model, str) or not model):
            raise ValueError(f"model must be a non-empty str, got {model!r}")
        if model is None and model_client is None:
            raise ValueError("model is required (or pass a model_client that ignores it)")
        if system is not None and not isinstance(system, (str, list)):
            raise ValueError(f"system must be a str or a list of content blocks, got {system!r}")
        if max_output_retries is not None and (isinstance(max_output_retries, bool) or not
                                               isinstance(max_output_retries, int) or
                                               max_output_retries < 0):
            raise ValueError(f"max_output_retries must be an int >= 0, got {max_output_retries!r}")
        if on_model_request is not None and not callable(on_model_request):
            raise ValueError(f"on_model_request must be callable, got {on_model_request!r}")
        for name, flag in (("include_partial_messages", include_partial_messages),
                           ("parallel_tool_calls", parallel_tool_calls)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        if extra is not None and not isinstance(extra, dict):
            raise ValueError(f"extra must be a dict of request body fields, got {extra!r}")
        if history_store is not None and not all(
                callable(getattr(history_store, m, None)) for m in ("load", "append", "replace")):
            raise ValueError("history_store must have load(), append() and replace(), "
                             f"got {history_store!r}")
        if model_client is None:
            from .models.anthropic import AnthropicClient

            model_client = AnthropicClient(api_key=api_key, base_url=base_url)
        self._output = resolve_output_schema(output_schema)
        self._settings = QuerySettings(
            model=model, client=as_model_client(model_client), system=system, tools={},
            tool_definitions=[], max_turns=_positive_int("max_turns", max_turns) or 50,
            max_tokens=_positive_int("max_tokens", max_tokens) or 8192,
            request_timeout_ms=_positive_int("request_timeout_ms", request_timeout_ms,
                                             allow_none=True),
            auto_compact=compaction.resolve_auto_compact(auto_compact), output=self._output,
            max_output_retries=max_output_retries, on_model_request=on_model_request,
            include_partial_messages=include_partial_messages,
            parallel_tool_calls=parallel_tool_calls, extra=dict(extra or {}))
        if self._output is not None:
            self._settings.tool_definitions.append(self._output.tool_definition())
        from .history import History

        self._history = History(history_store)
        self._loaded = history_store is None
        self._load_lock = threading.Lock()
        self._guard = threading.Lock()
        self._run: Optional[QueryRun] = None
        self._last_prompt_tokens = 0  # of the last reply: what compaction looks at
        self.add_tools(*(tools or ()))

    # -- tools ---------------------------------------------------------------------------
    def add_tools(self, *tools: Any) -> None:
        """Register more tools (``Tool`` objects or functions)."""
        made = [as_tool(t) for t in flatten_tools(tools)]
        names = [t.name for t in made]
        for name in names:
            if self._output is not None and name == SUBMIT_OUTPUT_TOOL_NAME:
                raise ValueError(f"the tool name {SUBMIT_OUTPUT_TOOL_NAME!r} is reserved while "
                                 "output_schema is set")
            if name in self._settings.tools or names.count(name) > 1:
                raise ValueError(f"duplicate tool name {name!r}")
        for t in made:
            self._settings.tools[t.name] = t
            self._settings.tool_definitions.append(t.definition)

    # -- history ---------------------------------------------------------------------------
    def _ensure_loaded(self) -> None:
        with self._load_lock:
            if self._loaded:
                return
            loaded = self._history.load()  # a fail_on_error store raises: retried next time
            self._loaded = True
            self._history.replace(loaded or [], to_store=False)
            from .stores import repair_history

            for message in repair_history(self._history.messages):
                self._history.append(message)  # the store gets the repair too

    def get_history(self) -> List[Dict[str, Any]]:
        """A deep copy of the conversation."""
        self._ensure_loaded()
        return self._history.snapshot()

    def replace_history(self, messages: List[Dict[str, Any]]) -> None:
        """Replace the conversation (and the store's copy); only while no query runs."""
        if not isinstance(messages, list):
            raise ValueError(f"replace_history takes a list of messages, got {messages!r}")
        if not self._guard.acquire(blocking=False):
            raise ConcurrentQueryError("replace_history() while a query is running")
        try:
            with self._load_lock:
                self._loaded = True
            self._history.replace(messages)
            self._last_prompt_tokens = 0
        finally:
            self._guard.release()

    # -- queries ---------------------------------------------------------------------------
    def _prepare(self, prompt: Any, signal: Any, request_timeout_ms: Any, max_turns: Any,
                 max_tokens: Any, **fixed: Any) -> QuerySettings:
        """Check a query's prompt and overrides (ValueError naming them) before it starts."""
        _check_prompt(prompt)
        as_signal(signal)
        changes: Dict[str, Any] = dict(fixed)
        if request_timeout_ms is not _UNSET:
            changes["request_timeout_ms"] = _positive_int(
                "request_timeout_ms", request_timeout_ms, allow_none=True)
        if max_turns is not None:
            changes["max_turns"] = _positive_int("max_turns", max_turns)
        if max_tokens is not None:
            changes["max_tokens"] = _positive_int("max_tokens", max_tokens)
        return replace(self._settings, **changes) if changes else self._settings

    def query(self, prompt: Union[str, List[Dict[str, Any]]], *,
              signal: Optional[SignalLike] = None, request_timeout_ms: Any = _UNSET,
              max_turns: Optional[int] = None, max_tokens: Optional[int] = None) -> Iterator[Any]:
        """Run one query; yields ``AssistantMessage``, ``UserMessage`` (tool results),
        ``SystemMessage``, ``StreamEvent`` and, last, the ``ResultMessage``."""
        settings = self._prepare(prompt, signal, request_timeout_ms, max_turns, max_tokens)
        return self._iterate(prompt, settings, as_signal(signal), gated=True)

    def prompt(self, prompt: Union[str, List[Dict[str, Any]]], *,
               signal: Optional[SignalLike] = None, request_timeout_ms: Any = _UNSET,
               max_turns: Optional[int] = None, max_tokens: Optional[int] = None
               ) -> ResultMessage:
        """Run one query to its end and return the ``ResultMessage``."""
        # Nobody sees stream events here: don't produce them.
        quiet = {"include_partial_messages": False} if \
            self._settings.include_partial_messages else {}
        settings = self._prepare(prompt, signal, request_timeout_ms, max_turns, max_tokens,
                                 **quiet)
        result: Any = None
        for result in self._iterate(prompt, settings, as_signal(signal), gated=False):  # noqa: B007
            pass
        assert isinstance(result, ResultMessage)
        return result

    def interrupt(self) -> None:
        """End the running query as ``"interrupted"``; nothing when idle."""
        run = self._run
        if run is not None:
            run.interrupt()

    def _iterate(self, prompt: Any, settings: QuerySettings, signal: Any, *,
                 gated: bool) -> Iterator[Any]:
        run: Optional[QueryRun] = None
        loop: Optional[Loop] = None
        released = False
        if not self._guard.acquire(blocking=False):
            raise ConcurrentQueryError("this Agent is already running a query; create one "
                                       "Agent per conversation")
        try:
            started = time.monotonic()
            # The run exists before anything slow (the store's load), so an interrupt() from
            # now on reaches this query.
            run = QueryRun(signal, gated=gated, collect=gated)
            self._run = run
            self._ensure_loaded()
            self._history.append({"role": "user", "content": prompt})
            loop = Loop(self, run, settings)
            worker = threading.Thread(target=loop, name="lattice-query", daemon=True)
            worker.start()
            while True:
                item = run.next_item()
                if item is None:
                    break
                yield item
            end = run.ended
            assert end is not None
            repair = self._repair_tail(end, run)
            if repair is not None and gated:
                yield UserMessage(repair)
            result = _result(end, loop, started)
            released = True
            self._release(run)
            yield result
        finally:
            if not released:
                try:
                    if run is not None:
                        try:
                            if run.ended is None:
                                run.end(End("closed"))
                        finally:
                            if run.ended is not None:
                                self._repair_tail(run.ended, run)
                finally:
                    self._release(run)

    def _repair_tail(self, end: End, run: QueryRun) -> Optional[Dict[str, Any]]:
        """Answer the calls of an unanswered last reply, so the history stays sendable."""
        with run.cond:
            while run.writing:  # a write that began before the end completes first
                run.cond.wait()
            # The worker can no longer write (the query has ended), so the history is ours.
            uses = unanswered_tool_uses(self._history.messages)
            if not uses:
                return None
            why = WHY_NOT_ANSWERED.get(end.kind, WHY_NOT_ANSWERED["error"])
            blocks = []
            for use in uses:
                use_id = use.get("id", "")
                done = run.partial.get(use_id)
                if done is None:
                    what = ("was stopped before it finished (its result was discarded)"
                            if use_id in run.started else "was not run")
                    done = tool_result(use_id, f"The call {what}: {why}.", True)
                blocks.append(done)
            message = {"role": "user", "content": blocks}
        self._history.append(message)  # store I/O without the lock (see QueryRun.commit)
        return message

    def _release(self, run: Optional[QueryRun]) -> None:
        try:
            if run is not None:
                run.release()
        finally:  # even if a KeyboardInterrupt lands in run.release()
            self._run = None
            self._guard.release()

    def __repr__(self) -> str:
        s = self._settings
        return (f"<Agent model={s.model!r} tools={list(s.tools)} "
                f"messages={len(self._history.messages)}>")


def create_agent(**options: Any) -> Agent:
    """``Agent(**options)``."""
    return Agent(**options)


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and all(isinstance(b, dict) and "type" in b for b in prompt):
        return
    raise ValueError(f"prompt must be a str or a list of content blocks, got {prompt!r}")


def _result(end: End, loop: Loop, started: float) -> ResultMessage:
    """The ResultMessage for how the query ended (an error end raises instead)."""
    last = loop.last_reply
    common: Dict[str, Any] = dict(
        usage=loop.usage, stop_reason=last.get("stop_reason") if last else None,
        num_turns=loop.turns, duration_ms=int((time.monotonic() - started) * 1000))
    if end.kind == "finish":
        o = end.outcome
        return ResultMessage(o.subtype, is_error=o.is_error, result=o.result,
                             structured_result=o.structured_result, error=o.error, **common)
    if end.kind == "error":
        assert end.error is not None
        raise end.error
    text = loop.last_text()
    if end.kind == "interrupt":
        return ResultMessage("interrupted", result=text, **common)
    # Timeouts carry a RequestTimeoutError, aborts an AbortError (QueryRun made them).
    subtype = "error_timeout" if end.kind == "timeout" else "error_abort"
    return ResultMessage(subtype, is_error=True, result=text, error=end.error, **common)
