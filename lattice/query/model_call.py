"""One model request of a query: built, edited by the caller's hook, watched, sent, raced.

``ModelCaller.request()`` builds the ``ModelRequest`` from the query's settings and the
history (a fresh list over the history's shared message dicts; cache breakpoints within
``MAX_BREAKPOINTS``, on copies). ``ModelCaller.call()`` then, in this order (SPEC 16a):

1. enters the model phase of the race (the request's own signal and deadline);
2. gives ``on_model_request`` a copy it may edit freely, down to the content blocks (#22;
   without a hook nothing is copied);
3. tells the observers (tracing) about the request as it will be sent;
4. sends it and checks the reply; a lost race (abort, deadline, interrupt) becomes the
   query's ending, the worker unwinds with ``Stopped``.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Dict, List, Optional

from ..conversation.history import History
from ..errors import AbortError, RequestTimeoutError
from ..messages import StreamEvent, copy_json, normalize_reply
from ..models.base import ModelRequest
from ..observe.observer import ObserverGroup
from ..usage import Usage
from .caching import MAX_BREAKPOINTS, count_marks, fit_cache_breakpoints
from .endings import Ending
from .race import QueryRace, Stopped
from .settings import QuerySettings

NO_USAGE = Usage()  # never changed: Usage sums are new values

__all__ = ["ModelCaller", "private_copy"]


def billed_usage(entries: Any) -> Usage:
    """A reply's ``billed_usage`` (``[{"model": ..., "usage": {...}}]``: what replies the
    client discarded used, e.g. those a ``FallbackModelClient``'s ``on_reply`` rejected),
    summed by model; anything malformed counts as nothing."""
    total = Usage()
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("usage"), dict):
            model = entry.get("model")
            total += Usage.from_dict(entry["usage"]).of_model(
                model if isinstance(model, str) else None)
    return total


def private_copy(request: ModelRequest) -> ModelRequest:
    """``request`` with its own messages, system, tools, extra and output format, down to
    the content blocks: what a hook does to it reaches neither the history nor the Agent."""
    return dataclasses.replace(
        request, messages=copy_json(request.messages), system=copy_json(request.system),
        tools=copy_json(request.tools), extra=copy_json(request.extra),
        output_format=copy_json(request.output_format))


class ModelCaller:
    """Builds and sends one query's model requests (the loop decides what to do with the
    replies)."""

    __slots__ = ("race", "settings", "history", "observers", "query_token", "fixed_marks",
                 "usage", "last_usage", "up", "children", "lock")

    def __init__(self, race: QueryRace, settings: QuerySettings, history: History,
                 observers: Optional[ObserverGroup], query_token: Any,
                 usage: Optional[Usage] = None) -> None:
        self.race = race
        self.settings = settings
        self.history = history
        self.observers = observers  # None when nobody watches: one check per event
        self.query_token = query_token
        # of every reply of the query (a discarded one is billed too); a resumed durable
        # run starts from what its earlier replies used
        self.usage = usage if usage is not None else Usage()
        self.last_usage = NO_USAGE  # of the last reply (read only after a call)
        # A subagent's query: its parent's ``add_child`` (SPEC 22: usage flows up as spent).
        self.up: Optional[Callable[[Usage], None]] = None
        # What subagents spent in the current batch (``add_child``), kept with its results
        # for a durable run's totals (None: not kept, a query without a journal).
        self.children: Optional[Usage] = None
        self.lock = threading.Lock()  # parallel subagents add from their threads
        system, tools = settings.system, settings.tool_definitions
        self.fixed_marks = (len(tools) - [t.get("cache_control") for t in tools].count(None)
                            + (count_marks(system) if type(system) is list else 0))

    def request(self) -> ModelRequest:
        """The next turn's request: the history, the Agent's system prompt and tools, cache
        breakpoints within ``MAX_BREAKPOINTS`` (on copies)."""
        s = self.settings
        on_event = None
        if s.include_partial_messages:
            emit = self.race.emit
            on_event = lambda event: emit(StreamEvent(event))  # noqa: E731
        sendable = self.history.sendable
        request = ModelRequest(
            model=s.model, messages=list(sendable), system=s.system,
            tools=list(s.tool_definitions), max_tokens=s.max_tokens,
            timeout_ms=s.request_timeout_ms, on_event=on_event, extra=dict(s.extra),
            signal=self.race.controller.signal)  # call() gives it the request's own
        if s.output_native and s.output is not None:
            request.output_format = s.output.json_schema
        present = self.fixed_marks + self.history.marks.count(sendable)
        if present > MAX_BREAKPOINTS or s.prompt_caching:
            fit_cache_breakpoints(request, present, mark=s.prompt_caching)
        return request

    def summary_request(self, messages: List[Dict[str, Any]]) -> ModelRequest:
        """A compaction summary's request: ``messages`` only (no system, no tools, no
        streaming, no output format, no cache marks: its prefix is never read again)."""
        s = self.settings
        return ModelRequest(model=s.model, messages=messages, max_tokens=s.max_tokens,
                            timeout_ms=s.request_timeout_ms, extra=dict(s.extra),
                            signal=self.race.controller.signal)

    def call(self, request: ModelRequest) -> Dict[str, Any]:
        """One model call, raced against abort, interrupt and the request deadline; its
        reply's usage is added to the query's (``usage``, ``last_usage``)."""
        race, observers, hook = self.race, self.observers, self.settings.on_model_request
        request.signal = race.start_model(request.timeout_ms)
        watched, token = False, None
        try:
            if hook is not None:
                mine = private_copy(request)
                request = hook(mine) or mine
            if observers:
                token, watched = observers.model_start(self.query_token, request), True
            raw = self.settings.client.create(request)
            reply = normalize_reply(raw)
        except BaseException as exc:
            if watched:
                observers.model_end(token, None, exc)  # type: ignore[union-attr]
            self.lost(exc)
            raise
        if watched:
            observers.model_end(token, reply, None)  # type: ignore[union-attr]
        race.finish_model()
        usage = self.last_usage = Usage.from_dict(reply.get("usage")).of_model(
            reply.get("model") or request.model)  # Usage.by_model: the model that answered
        billed = raw.get("billed_usage") if type(raw) is dict else None
        if billed:  # replies the client discarded (a fallback's rejected ones): billed too
            usage = usage + billed_usage(billed)
        self.usage += usage
        if self.up is not None:
            self.up(usage)
        return reply

    def add_child(self, usage: Usage) -> None:
        """Usage a subagent spent (each of its requests as it comes, or what a resumed or
        replayed child run had spent before): the query's, and its parent's in turn, so
        every budget above sees it at once."""
        with self.lock:
            self.usage += usage
            if self.children is not None:
                self.children += usage
        if self.up is not None:
            self.up(usage)

    def take_children(self) -> Usage:
        """What subagents spent since the last call (kept with the batch's results)."""
        with self.lock:
            if self.children is None:
                return NO_USAGE
            spent, self.children = self.children, Usage()
        return spent

    def lost(self, error: BaseException) -> None:
        """A failed call: the query's ending if it lost a race (then ``Stopped``), else the
        model phase ends and the caller raises ``error``."""
        race = self.race
        if isinstance(error, Stopped) or race.ended is not None:
            raise Stopped from None
        if isinstance(error, RequestTimeoutError):
            race.end(Ending("error_timeout", error=error))
            raise Stopped from None
        if isinstance(error, AbortError) and race.user_aborted():
            race.end(Ending("error_abort", error=error))
            raise Stopped from None
        race.finish_model()
