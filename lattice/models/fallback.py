"""``FallbackModelClient``: one model client made of several, tried in order (SPEC 25).

A wrapper, not a loop change: the loop sees one client. For each request the clients are
tried in order; the next one gets the request when the one before failed with an error
``fallback_on`` names (classes, or a predicate ``exc -> bool``) or when ``on_reply``
rejected its reply. What never falls back:

* an abort (the query's signal fired): the caller asked to stop, not to try elsewhere;
* a failure after part of a streamed reply reached the caller (``on_event`` was called):
  the caller has seen text another model would not write, so the error propagates;
* an error ``fallback_on`` does not name, ``PromptTooLongError`` among them by default:
  the loop's overflow recovery (``auto_compact``) compacts the history and tries the turn
  again, and the retry reaches the smaller-window client with the shorter history. That
  is why a too-long prompt is raised as itself, never wrapped.

Each client keeps its own retries (a client's ``RetryPolicy`` runs before the fallback
moves on). When every client failed, the last error is raised with ``.attempts``: every
failure in order, the raised one last. The reply's ``model`` names the model that
answered (the reply's own, else the model id that client was sent).
"""

from __future__ import annotations

import dataclasses
import time
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from ..errors import (
    AbortError,
    APIConnectionError,
    InternalServerError,
    OverloadedError,
    RateLimitError,
    ReplyRejectedError,
    RequestTimeoutError,
)
from .base import ModelClient, ModelRequest, ReplyDict, as_model_client

__all__ = ["FallbackModelClient", "DEFAULT_FALLBACK_ON"]

DEFAULT_FALLBACK_ON: Tuple[Type[BaseException], ...] = (
    RateLimitError, OverloadedError, InternalServerError, APIConnectionError)

FallbackOn = Union[Type[BaseException], Sequence[Type[BaseException]],
                   Callable[[BaseException], bool]]


def _is_error_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _predicate(fallback_on: Any) -> Callable[[BaseException], bool]:
    """``fallback_on`` as a predicate; ValueError naming it when it is neither exception
    classes nor a callable."""
    if _is_error_class(fallback_on):
        return lambda exc: isinstance(exc, fallback_on)
    if isinstance(fallback_on, (tuple, list)) and all(map(_is_error_class, fallback_on)):
        classes = tuple(fallback_on)
        return lambda exc: isinstance(exc, classes)
    if callable(fallback_on):
        return fallback_on  # type: ignore[no-any-return]
    raise ValueError("fallback_on must be an exception class, a tuple of them, or a "
                     f"callable exc -> bool, got {fallback_on!r}")


def _model_map(model_map: Any, size: int) -> Dict[int, str]:
    if model_map is None:
        return {}
    if not isinstance(model_map, Mapping):
        raise ValueError(f"model_map must be a dict {{client_index: model}}, got {model_map!r}")
    for index, model in model_map.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
            raise ValueError(f"model_map: {index!r} is not the index of one of the "
                             f"{size} clients")
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model_map[{index}] must be a non-empty str, got {model!r}")
    return dict(model_map)


class _Watch:
    """The caller's ``on_event``, noting whether any event reached it."""

    __slots__ = ("target", "reached")

    def __init__(self, target: Callable[[Dict[str, Any]], None]) -> None:
        self.target = target
        self.reached = False

    def __call__(self, event: Dict[str, Any]) -> None:
        self.reached = True
        self.target(event)


class FallbackModelClient:
    """A ``ModelClient`` that tries ``clients`` in order for each request (SPEC 25).

    Args:
        clients: model clients (objects with ``.create(request)`` or plain callables),
            the preferred first; at least one.
        fallback_on: the exception classes (a class or a tuple) that move on to the next
            client, or a predicate ``exc -> bool``. Default: rate limits, overload, 5xx
            and failed connections (``RateLimitError``, ``OverloadedError``,
            ``InternalServerError``, ``APIConnectionError``).
        on_reply: ``reply -> bool``: True accepts the reply, False rejects it (the next
            client is asked). A rejected reply is billed all the same: the accepted reply
            carries its usage in ``billed_usage``, which the query's usage and cost count.
        model_map: ``{client_index: model}``: the model id that client sends. Without an
            entry, a client built with its own ``model`` sends that, else the request's.

    Thread-safe when its clients are: it keeps no state per request.
    """

    def __init__(self, clients: Sequence[Any], *, fallback_on: FallbackOn = DEFAULT_FALLBACK_ON,
                 on_reply: Optional[Callable[[ReplyDict], bool]] = None,
                 model_map: Optional[Mapping[int, str]] = None) -> None:
        if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence):
            raise ValueError(f"clients must be a list of model clients, got {clients!r}")
        if not clients:
            raise ValueError("clients must hold at least one model client")
        self.clients: List[ModelClient] = [as_model_client(c) for c in clients]
        self.fallback_on = fallback_on
        self._falls_back = _predicate(fallback_on)
        if on_reply is not None and not callable(on_reply):
            raise ValueError(f"on_reply must be a callable reply -> bool or None, got "
                             f"{on_reply!r}")
        self.on_reply = on_reply
        self.model_map = _model_map(model_map, len(self.clients))
        # each client's own model id (model_map's, else the one it was built with), or None
        self._models: List[Optional[str]] = [self._own(i) for i in range(len(self.clients))]
        self._first = self.clients[0].create  # bound once: the happy path's one call

    def _own(self, index: int) -> Optional[str]:
        mapped = self.model_map.get(index)
        if mapped is not None:
            return mapped
        own = getattr(self.clients[index], "model", None)
        return own if isinstance(own, str) and own else None

    def model_for(self, index: int, request: ModelRequest) -> Optional[str]:
        """The model id client ``index`` is sent: ``model_map``'s, the client's own, or
        the request's."""
        return self._models[index] or request.model

    def create(self, request: ModelRequest) -> ReplyDict:
        """The first accepted reply, trying each client in order."""
        model = self._models[0]
        if request.on_event is not None or (model is not None and model != request.model):
            return self._create(request, 0, [], time.monotonic(), [])
        # The happy path, the common one, about as cheap as calling the first client: it
        # gets the request itself (nothing to change, nothing to watch).
        started = time.monotonic() if request.timeout_ms else 0.0  # the deadline's start
        try:
            reply = self._first(request)
        except Exception as exc:
            return self._first_failed(request, exc, started)
        if type(reply) is dict and not reply.get("model") and request.model:
            reply = {**reply, "model": request.model}
        on_reply = self.on_reply
        if on_reply is None or on_reply(reply):
            return reply
        return self._reject(request, 0, reply, None, [], started, [])

    def _first_failed(self, request: ModelRequest, exc: Exception, started: float
                      ) -> ReplyDict:
        """The first client failed on the happy path: the next, or raise."""
        if len(self.clients) == 1 or not self._moves_on(exc, request, None):
            _attach(exc, [exc])
            raise exc
        return self._create(request, 1, [exc], started, [])

    def _create(self, request: ModelRequest, first: int, failures: List[BaseException],
                started: float, billed: List[Dict[str, Any]]) -> ReplyDict:
        """Try the clients from ``first`` on (``failures``: what failed before; ``billed``:
        the usage of the replies rejected so far, which the accepted one carries in
        ``billed_usage``, so that the query's usage and cost count them)."""
        last = len(self.clients) - 1
        for index in range(first, last + 1):
            if index:
                request.signal.throw_if_aborted()
            attempt, watch = self._attempt(index, request, started)
            try:
                reply = self.clients[index].create(attempt)
            except Exception as exc:
                failures.append(exc)
                if index == last or not self._moves_on(exc, request, watch):
                    _attach(exc, failures)
                    raise
                continue
            if type(reply) is dict and not reply.get("model") and attempt.model:
                reply = {**reply, "model": attempt.model}
            if self.on_reply is None or self.on_reply(reply):
                if billed and type(reply) is dict:
                    reply = {**reply, "billed_usage": billed}
                return reply
            return self._reject(request, index, reply, watch, failures, started, billed)
        raise AssertionError("unreachable")  # pragma: no cover

    def _reject(self, request: ModelRequest, index: int, reply: ReplyDict,
                watch: Optional[_Watch], failures: List[BaseException],
                started: float, billed: List[Dict[str, Any]]) -> ReplyDict:
        """``on_reply`` refused client ``index``'s reply: the next client, unless it was
        the last or the reply was shown to the caller already."""
        model = reply.get("model") if isinstance(reply, dict) else None
        rejected = ReplyRejectedError(
            f"on_reply rejected the reply of client {index} "
            f"({model or type(self.clients[index]).__name__})", reply=reply)
        failures.append(rejected)
        if index == len(self.clients) - 1 or (watch is not None and watch.reached):
            raise _attach(rejected, failures)
        if isinstance(reply, dict) and isinstance(reply.get("usage"), dict):
            billed.append({"model": model or self.model_for(index, request),
                           "usage": reply["usage"]})
        return self._create(request, index + 1, failures, started, billed)

    def _attempt(self, index: int, request: ModelRequest, started: float
                 ) -> Tuple[ModelRequest, Optional[_Watch]]:
        """The request client ``index`` gets: its model, what is left of the deadline,
        and ``on_event`` watched (the request itself when nothing changes: the common
        first try costs no copy)."""
        model = self._models[index] or request.model
        on_event = request.on_event
        if model == request.model and on_event is None and not (index and request.timeout_ms):
            return request, None
        changes: Dict[str, Any] = {"model": model}
        watch = None
        if on_event is not None:
            watch = changes["on_event"] = _Watch(on_event)
        if request.timeout_ms and index:
            left = request.timeout_ms - (time.monotonic() - started) * 1000.0
            if left <= 0:
                raise RequestTimeoutError(
                    f"model request timed out after {request.timeout_ms} ms "
                    f"(before fallback client {index})", kind="request")
            changes["timeout_ms"] = max(1, int(left))
        return dataclasses.replace(request, **changes), watch

    def _moves_on(self, exc: BaseException, request: ModelRequest,
                  watch: Optional[_Watch]) -> bool:
        if isinstance(exc, AbortError) or request.signal.aborted:
            return False
        if watch is not None and watch.reached:
            return False  # part of this reply reached the caller
        return bool(self._falls_back(exc))

    def count_tokens(self, request: ModelRequest) -> int:
        """The first client's count (with the model it would be sent)."""
        counter = getattr(self.clients[0], "count_tokens", None)
        if counter is None:
            raise NotImplementedError(f"{type(self.clients[0]).__name__} has no count_tokens")
        model = self.model_for(0, request)
        if model != request.model:
            request = dataclasses.replace(request, model=model)
        return int(counter(request))

    def close(self) -> None:
        """Close every client that can be closed."""
        for client in self.clients:
            close = getattr(client, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> FallbackModelClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        inner = ", ".join(type(c).__name__ for c in self.clients)
        return f"FallbackModelClient([{inner}])"


def _attach(exc: BaseException, failures: List[BaseException]) -> BaseException:
    """``exc`` with ``.attempts``: every failure of the request in order, ``exc`` last."""
    try:
        exc.attempts = list(failures)  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - an exception type with __slots__
        pass
    return exc
