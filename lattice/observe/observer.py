"""The loop's event seam: what a query reports to observers (tracing, logging, metering).

A query reports its start and end, each model request's start and end, and each tool
call's start and end. ``model_start`` gets the request as it is sent: after the Agent's
``on_model_request`` hook (SPEC 16a). ``*_start`` returns an opaque token that the
matching ``*_end`` gets back, so an observer keeps its own state (a span, a start time)
without a lookup.
With no observer the loop's cost is a None check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
)

if TYPE_CHECKING:
    from ..messages import ResultMessage
    from ..models.base import ModelRequest

__all__ = ["Observer", "ObserverGroup", "ToolCallLike", "QueryDetails", "query_details",
           "describing"]

log = logging.getLogger("lattice")
_NO_TOKEN: Any = object()
_details = threading.local()


class QueryDetails(NamedTuple):
    """Who runs a query and where it talks, for observers that record it (tracing):
    readable with ``query_details()`` during ``query_start`` (which keeps its 0.3
    signature, so observers written for it keep working)."""

    agent_name: Optional[str] = None
    agent_id: Optional[str] = None
    conversation_id: Optional[str] = None  # the store's session id, else the run id
    server_address: Optional[str] = None  # the model client's host
    server_port: Optional[int] = None
    # A subagent's query whose model client is not its parent's (SPEC 22): the provider its
    # spans name, not the parent's tracer's; None for any other query.
    provider_name: Optional[str] = None


def query_details() -> Optional[QueryDetails]:
    """The details of the query whose ``query_start`` is running on this thread."""
    return getattr(_details, "value", None)


@contextlib.contextmanager
def describing(details: QueryDetails) -> Iterator[None]:
    """``query_details()`` is ``details`` inside the block, on this thread."""
    before = query_details()
    _details.value = details
    try:
        yield
    finally:
        _details.value = before


class ToolCallLike(Protocol):
    """What ``tool_start`` reads of a call (``lattice.ToolCall`` has all of it)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def input(self) -> Any: ...


class Observer:
    """Receives a query's events; every method is optional (no-op here). Tokens are opaque
    values an observer returns from *_start and gets back in the matching *_end.

    ``model_start`` and ``tool_start`` may be called from threads other than the one that
    called ``query_start``; parallel tool calls call ``tool_start``/``tool_end``
    concurrently. ``query_end``'s ``error`` is the exception that escaped the query or the
    ``ResultMessage.error``.
    """

    def query_start(self, model: Optional[str], prompt: Any) -> Any:
        return None

    def query_end(self, token: Any, result: Optional[ResultMessage],
                  error: Optional[BaseException]) -> None:
        return None

    def agent_start(self, model: Optional[str], prompt: Any, *, name: Optional[str] = None,
                    parent: Any = None) -> Any:
        """A query starts, of the Agent named ``name`` (its ``name`` option); ``parent`` is
        the token of the tool call that runs it when it is a subagent's (SPEC 22), else
        None. Its token goes to ``query_end``. The default is ``query_start``."""
        return self.query_start(model, prompt)

    def model_start(self, query: Any, request: ModelRequest) -> Any:
        """``query`` is the token from ``query_start``."""
        return None

    def model_end(self, token: Any, reply: Optional[Dict[str, Any]],
                  error: Optional[BaseException]) -> None:
        """``reply`` is the assistant dict (with ``usage``, ``model``,
        ``provider_response_id``, ``stop_reason``), None when the request failed."""
        return None

    def tool_start(self, query: Any, call: ToolCallLike) -> Any:
        """``call`` has ``.id``, ``.name`` and ``.input``."""
        return None

    def tool_end(self, token: Any, result: Optional[Dict[str, Any]],
                 error: Optional[BaseException]) -> None:
        """``result`` is the call's ``tool_result`` block."""
        return None


class ObserverGroup(Observer):
    """Several observers as one. Each gets every event with its own token; an observer
    that raises is logged (WARNING, on the ``lattice`` logger) and never breaks the query
    or the other observers."""

    def __init__(self, observers: Iterable[Observer]) -> None:
        self.observers = tuple(observers)

    def _each(self, method: str, tokens: Any, *args: Any) -> List[Any]:
        """Call ``method`` on each observer, with its own token from ``tokens`` (a list this
        group returned; anything else, e.g. None, gives each None) unless ``_NO_TOKEN``."""
        out: List[Any] = []
        mine = isinstance(tokens, list) and len(tokens) == len(self.observers)
        for index, observer in enumerate(self.observers):
            head = () if tokens is _NO_TOKEN else (tokens[index] if mine else None,)
            try:
                out.append(getattr(observer, method)(*head, *args))
            except Exception:
                log.warning("observer %r failed in %s", observer, method, exc_info=True)
                out.append(None)
        return out

    def query_start(self, model: Optional[str], prompt: Any) -> Any:
        return self._each("query_start", _NO_TOKEN, model, prompt)

    def query_end(self, token: Any, result: Optional[ResultMessage],
                  error: Optional[BaseException]) -> None:
        self._each("query_end", token, result, error)

    def agent_start(self, model: Optional[str], prompt: Any, *, name: Optional[str] = None,
                    parent: Any = None) -> Any:
        # ``parent`` is this group's token of the parent's tool call: one per observer.
        mine = isinstance(parent, list) and len(parent) == len(self.observers)
        out: List[Any] = []
        for index, observer in enumerate(self.observers):
            try:
                out.append(observer.agent_start(model, prompt, name=name,
                                                parent=parent[index] if mine else None))
            except Exception:
                log.warning("observer %r failed in agent_start", observer, exc_info=True)
                out.append(None)
        return out

    def model_start(self, query: Any, request: ModelRequest) -> Any:
        return self._each("model_start", query, request)

    def model_end(self, token: Any, reply: Optional[Dict[str, Any]],
                  error: Optional[BaseException]) -> None:
        self._each("model_end", token, reply, error)

    def tool_start(self, query: Any, call: ToolCallLike) -> Any:
        return self._each("tool_start", query, call)

    def tool_end(self, token: Any, result: Optional[Dict[str, Any]],
                 error: Optional[BaseException]) -> None:
        self._each("tool_end", token, result, error)

    def watch_tool(self, query: Any, call: ToolCallLike,
                   run: Callable[[], Tuple[Dict[str, Any], bool]]
                   ) -> Tuple[Dict[str, Any], bool]:
        """Run one tool call (``run()``: its result block and end_turn) between
        ``tool_start`` and ``tool_end``."""
        token = self.tool_start(query, call)
        try:
            call.trace = token  # type: ignore[attr-defined] # a subagent's query nests in it
        except AttributeError:  # a call-like object without the slot
            pass
        try:
            done = run()
        except BaseException as exc:
            self.tool_end(token, None, exc)
            raise
        self.tool_end(token, done[0], None)
        return done

    def __repr__(self) -> str:
        return f"<ObserverGroup {list(self.observers)!r}>"
