"""What one streamed reply may take as a whole (SPEC 21b): its bytes, and its silences.

A line, an event or a frame is bounded where it is read (``sse.py``, ``eventstream.py``);
but an endless stream of small valid deltas passes every such check and grows the reply
without end. ``ReplyBudget`` counts what an accumulator keeps (text, thinking, tool input
JSON, reasoning items: their UTF-8 bytes, together) against ``max_response_bytes``, and
counts the events that made the reply progress; ``watch_idle`` ends a stream whose events
have not progressed for ``stream_idle_timeout_ms`` (pings, comments and unknown events do
not count).

``ReplyBudget`` is an ``int``: the limit itself. A codec's ``read_stream(chunks, on_event,
limit)`` gets it where it always got the int limit, so a codec that knows nothing of
budgets still bounds its lines and frames with it, and the accumulators here find the
budget in it (``budget_of``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterable, Iterator, Optional

from ..errors import APIConnectionError
from .body import too_large

__all__ = ["ReplyBudget", "budget_of", "watch_idle", "bound_silence", "idle_error",
           "DEFAULT_IDLE_TIMEOUT_MS"]

DEFAULT_IDLE_TIMEOUT_MS = 300_000


class ReplyBudget(int):
    """``max_response_bytes`` (its value), plus what one reply has used of it.

    ``take(text)`` counts a delta's bytes (``too_large`` past the limit); ``take_value``
    counts a whole JSON item; ``progress()`` marks an event that changed the reply."""

    left: int
    useful: int  # events that made the reply progress, for watch_idle

    def __new__(cls, limit: int) -> ReplyBudget:
        budget = super().__new__(cls, limit)
        budget.left = limit
        budget.useful = 0
        return budget

    def take(self, text: str) -> int:
        """Count ``text``'s UTF-8 bytes; return them."""
        # isascii() is O(1) on CPython: most deltas cost one len(), no encoding
        size = len(text) if text.isascii() else len(text.encode("utf-8", "replace"))
        self.left -= size
        self.useful += 1
        if self.left < 0:
            raise too_large("the streamed reply", int(self))
        return size

    def take_value(self, value: Any) -> int:
        """Count a whole item (a block or output item as sent): the size of its JSON."""
        return self.take(json.dumps(value, default=str))

    def give_back(self, size: int) -> None:
        """``size`` bytes counted before are no longer kept (replaced by a whole item)."""
        self.left += size

    def progress(self) -> None:
        self.useful += 1


def budget_of(limit: int) -> ReplyBudget:
    """The budget the transport passed as ``limit``, else a fresh one of that size (a
    parser called directly)."""
    return limit if isinstance(limit, ReplyBudget) else ReplyBudget(limit)


def idle_error(idle_ms: float) -> APIConnectionError:
    return APIConnectionError(
        f"the stream sent nothing useful for stream_idle_timeout_ms ({idle_ms:g} ms); "
        "the response was closed")


def watch_idle(chunks: Iterable[bytes], budget: ReplyBudget, idle_ms: Optional[float],
               clock: Callable[[], float] = time.monotonic) -> Iterator[bytes]:
    """``chunks``, ended with ``idle_error`` when ``idle_ms`` pass without the reply
    progressing (a server sending only pings). A server sending nothing at all is ended by
    the socket's read timeout, which the transport sets to the same limit."""
    if idle_ms is None:
        yield from chunks
        return
    idle_s = idle_ms / 1000.0
    seen, last = budget.useful, clock()
    for chunk in chunks:
        now = clock()
        if budget.useful != seen:
            seen, last = budget.useful, now
        elif now - last > idle_s:
            raise idle_error(idle_ms)
        yield chunk


def bound_silence(response: Any, idle_ms: Optional[float]) -> None:
    """A stream that sends nothing at all ends after ``idle_ms`` too: the socket's read
    timeout, from now on (the headers came; until then the usual read timeout held)."""
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    if sock is None or idle_ms is None:
        return
    try:
        current = sock.gettimeout()
        if current is None or current > idle_ms / 1000.0:
            sock.settimeout(idle_ms / 1000.0)
    except OSError:  # closed under us: the read that follows says so
        pass
