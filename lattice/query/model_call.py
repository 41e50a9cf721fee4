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
from typing import Any, Dict, List, Optional

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
                 "usage", "last_usage")

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
            reply = normalize_reply(self.settings.client.create(request))
        except BaseException as exc:
            if watched:
                observers.model_end(token, None, exc)  # type: ignore[union-attr]
            self.lost(exc)
            raise
        if watched:
            observers.model_end(token, reply, None)  # type: ignore[union-attr]
        race.finish_model()
        usage = self.last_usage = Usage.from_dict(reply.get("usage"))
        self.usage += usage
        return reply

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
