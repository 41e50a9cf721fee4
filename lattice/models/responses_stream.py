"""Responses API streaming: ``response.*`` events -> one assistant dict.

The SSE reading is the Messages API's (``sse.parse_stream``: events typed alike, a
``[DONE]`` some proxies send skipped), fed to ``ResponsesStreamAccumulator``. The stream
ends with ``response.completed`` or ``response.incomplete``, whose ``response`` is the
whole response object: it is read exactly like a JSON reply, so streamed and not
streamed give the same message. Output items assembled from the events before it
(``output_item.added``/``done``, text and argument deltas) stand in when a server sends
the final object without its ``output``. ``response.failed`` and ``error`` events raise
the error their code names; a stream that ends before the final event raises
``APIConnectionError``. Unknown events are ignored.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional

from ..errors import APIConnectionError
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import ReplyBudget
from .responses_status import error_from_responses
from .responses_wire import reply_from_response
from .shape import malformed
from .sse import parse_stream

__all__ = ["ResponsesStreamAccumulator", "parse_responses_stream"]

_FINAL = ("response.completed", "response.incomplete")


class ResponsesStreamAccumulator:
    """Feed it event dicts in order; ``reply()`` gives the assistant dict."""

    __slots__ = ("_items", "_texts", "_args", "_head", "_budget", "_kept", "final", "done")

    def __init__(self, budget: Optional[ReplyBudget] = None) -> None:
        self._items: Dict[Any, Dict[str, Any]] = {}
        self._texts: Dict[Any, List[str]] = {}  # output_index -> text deltas
        self._args: Dict[Any, List[str]] = {}  # output_index -> argument deltas
        self._head: Dict[str, Any] = {}
        self._budget = ReplyBudget(DEFAULT_MAX_RESPONSE_BYTES) if budget is None else budget
        self._kept: Dict[Any, int] = {}  # output_index -> bytes counted for it so far
        self.final: Optional[Dict[str, Any]] = None
        self.done = False  # the final event came (``final``)

    def release(self) -> None:
        """Drop what was gathered (a failed stream: nothing of it is used), in place: the
        traceback's frames may hold a list."""
        for parts in (*self._texts.values(), *self._args.values()):
            parts.clear()
        for gathered in (self._items, self._texts, self._args):
            gathered.clear()
        self.final = None

    def feed(self, event: Dict[str, Any]) -> None:
        """Apply one event; raise the error a failed response or ``error`` event names."""
        kind = event.get("type")
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            delta = event.get("delta")
            if isinstance(delta, str):
                self._count(event.get("output_index"), self._budget.take(delta))
                self._texts.setdefault(event.get("output_index"), []).append(delta)
        elif kind == "response.function_call_arguments.delta":
            delta = event.get("delta")
            if isinstance(delta, str):
                self._count(event.get("output_index"), self._budget.take(delta))
                self._args.setdefault(event.get("output_index"), []).append(delta)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, dict):
                index = event.get("output_index", len(self._items))
                # the item replaces what was counted for its index: the item added
                # before, and its deltas, which it holds (a reasoning item comes whole)
                self._budget.give_back(self._count(index, 0, replace=True))
                self._count(index, self._budget.take_value(item))
                self._items[index] = dict(item)
                if kind == "response.output_item.done":  # whole: its deltas are in it
                    self._texts.pop(event.get("output_index"), None)
                    self._args.pop(event.get("output_index"), None)
        elif kind in _FINAL:
            response = event.get("response")
            if not isinstance(response, dict):
                raise APIConnectionError(f"{kind} event without a response object")
            self._budget.progress()
            self.final = response
            self.done = True
        elif kind == "response.failed":
            response = event.get("response")
            raise error_from_responses(response.get("error") if isinstance(response, dict)
                                       else None)
        elif kind == "error":
            raise error_from_responses(event.get("error") if isinstance(
                event.get("error"), dict) else event)
        elif kind in ("response.created", "response.in_progress", "response.queued"):
            response = event.get("response")
            self._budget.progress()
            if isinstance(response, dict):
                self._head.update({k: response[k] for k in ("id", "model") if response.get(k)})

    def _count(self, index: Any, size: int, *, replace: bool = False) -> int:
        """Add ``size`` to the bytes counted for output ``index`` (``replace``: set it);
        return what was counted before."""
        try:
            before = self._kept.get(index, 0)
        except TypeError:  # an unhashable index
            raise malformed("output_index", index, "an integer") from None
        self._kept[index] = size if replace else before + size
        return before

    def message(self) -> Dict[str, Any]:
        """The assistant dict; ``APIConnectionError`` if the stream was cut."""
        final = self.final
        if final is None:
            raise APIConnectionError(
                "the stream ended before response.completed or response.incomplete")
        if not final.get("output") and self._items:
            final = dict(final, output=[self._assembled(i) for i in sorted(
                self._items, key=lambda k: (0, k) if isinstance(k, int) else (1, str(k)))])
        missing = {k: v for k, v in self._head.items() if not final.get(k)}
        if missing:  # id and model from response.created when the end lacks them
            final = dict(final, **missing)
        return reply_from_response(final)

    def _assembled(self, index: Any) -> Dict[str, Any]:
        item = self._items[index]
        if index in self._args and item.get("type") == "function_call":
            item["arguments"] = (item.get("arguments") or "") + "".join(self._args[index])
        if index in self._texts and item.get("type") == "message":
            item["content"] = [{"type": "output_text", "text": "".join(self._texts[index])}]
        return item


def parse_responses_stream(
    chunks: Iterable[bytes], on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
    limit: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Dict[str, Any]:
    """Read a Responses SSE byte stream up to its final event; return the assistant dict.

    Each event dict goes to ``on_event`` exactly as received, before it is applied. The
    events are typed as the Messages API's are, so ``sse.parse_stream`` reads them.
    """
    return parse_stream(chunks, on_event, limit, ResponsesStreamAccumulator)
