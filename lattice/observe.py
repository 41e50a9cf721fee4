"""One event seam for cost and visibility: observers of a query's life.

The loop reports query, model-request and tool-call starts and ends to zero or more
observers (tracing is one: ``lattice.tracing``). With none, the loop pays one ``None``
check per event. An observer that raises is logged and otherwise ignored: watching a
query must never change how it ends.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from .calls import ToolCall
    from .messages import ResultMessage
    from .models.base import ModelRequest

__all__ = ["Observer", "Observers"]

log = logging.getLogger("lattice")
T = TypeVar("T")


class Observer:
    """Receives a query's events; every method is optional (no-op here). Tokens are opaque
    values an observer returns from ``*_start`` and gets back in the matching ``*_end``.
    ``model_*`` and ``tool_*`` may be called from worker threads, tool calls of a parallel
    batch concurrently."""

    def query_start(self, model: Optional[str], prompt: Any) -> Any:
        return None

    def query_end(self, token: Any, result: Optional[ResultMessage],
                  error: Optional[BaseException]) -> None:
        return None

    def model_start(self, query: Any, request: ModelRequest) -> Any:
        return None

    def model_end(self, token: Any, reply: Optional[Dict[str, Any]],
                  error: Optional[BaseException]) -> None:
        return None

    def tool_start(self, query: Any, call: ToolCall) -> Any:
        return None

    def tool_end(self, token: Any, result: Optional[Dict[str, Any]],
                 error: Optional[BaseException]) -> None:
        return None


def _safely(fn: Callable[..., T], *args: Any) -> Optional[T]:
    try:
        return fn(*args)
    except Exception:
        log.warning("observer %r failed", fn, exc_info=True)
        return None


class Observers:
    """The observers of one query, with that query's tokens."""

    __slots__ = ("observers", "tokens")

    def __init__(self, observers: List[Observer], model: Optional[str], prompt: Any) -> None:
        self.observers = observers
        self.tokens = [_safely(o.query_start, model, prompt) for o in observers]

    def end(self, result: Optional[ResultMessage], error: Optional[BaseException]) -> None:
        for o, token in zip(self.observers, self.tokens):
            _safely(o.query_end, token, result, error)

    def model_start(self, request: ModelRequest) -> List[Any]:
        return [_safely(o.model_start, t, request) for o, t in zip(self.observers, self.tokens)]

    def model_end(self, tokens: List[Any], reply: Optional[Dict[str, Any]],
                  error: Optional[BaseException]) -> None:
        for o, token in zip(self.observers, tokens):
            _safely(o.model_end, token, reply, error)

    def wrap_tool(self, call: ToolCall, run: Callable[[], Tuple[Dict[str, Any], bool]]
                  ) -> Tuple[Dict[str, Any], bool]:
        tokens = [_safely(o.tool_start, t, call) for o, t in zip(self.observers, self.tokens)]
        try:
            done = run()
        except BaseException as exc:
            for o, token in zip(self.observers, tokens):
                _safely(o.tool_end, token, None, exc)
            raise
        for o, token in zip(self.observers, tokens):
            _safely(o.tool_end, token, done[0], None)
        return done
