"""One running query: its loop in a worker thread, raced by the caller.

The loop runs in one daemon worker per query, so ``prompt()`` costs one thread handoff per
query, not one per turn; ``query()`` pays one per yielded history message, because a query
suspended at a ``yield`` is still running and waits for its consumer. The caller's thread
(the consumer of ``query()``) waits on one condition that is woken by a yielded message,
the loop's end, the abort signal, a request deadline (the shared timer thread) or
``interrupt()``: no busy polling, except for a bare ``threading.Event`` signal, which
cannot call back and is checked every ``EVENT_POLL_S``.

Whoever decides the end first wins, under ``cond``: the worker finishing, an abort, a
deadline, an interrupt during a model request, or the consumer closing the generator.
After that ``commit`` refuses every write, so a late reply from a worker that lost the race
can never enter the history; the consumer then repairs the history's tail. The history
write itself (store I/O included) runs outside ``cond``, so a slow store never stalls an
abort or the shared timer thread; readers after the end wait for a write in progress.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Set, TypeVar

from .cancellation import AbortController, AbortSignal, call_later, needs_polling
from .errors import AbortError, LatticeError, RequestTimeoutError

__all__ = ["QueryRun", "End", "Stopped"]

EVENT_POLL_S = 0.02
T = TypeVar("T")

IDLE, MODEL, TOOLS = "idle", "model", "tools"


def _nothing() -> None:
    pass


class Stopped(BaseException):
    """Raised in the worker when the query already ended: the worker just unwinds.

    A BaseException so that handler-style ``except Exception`` blocks in the loop let it
    through.
    """


class End:
    """How a query ended: ``kind`` is finish, abort, timeout, interrupt, closed or error."""

    __slots__ = ("kind", "error", "outcome")

    def __init__(self, kind: str, error: Optional[BaseException] = None,
                 outcome: Any = None) -> None:
        self.kind = kind
        self.error = error
        self.outcome = outcome

    def __repr__(self) -> str:
        return f"<End {self.kind} {self.error!r}>"


class QueryRun:
    """The state the worker and the consumer share for one query."""

    def __init__(self, signal: Optional[AbortSignal], *, gated: bool,
                 collect: bool = True) -> None:
        # Re-entrant: a signal handler (SIGINT -> interrupt()) may run while this thread holds it.
        self.cond = threading.Condition(threading.RLock())
        self.queue: Deque[Any] = deque()
        self.ended: Optional[End] = None
        self.gated = gated
        self.collect = collect  # False for prompt(): nobody reads the messages in between
        self.requested = 0  # items the consumer has asked for
        self.emitted = 0
        self.writing = 0  # commits writing to the history right now (without ``cond``)
        self.phase = IDLE
        self.request_no = 0  # which model request a deadline belongs to
        self.deadline: Optional[float] = None
        self.interrupted = False
        self.partial: Dict[str, Dict[str, Any]] = {}  # tool_use_id -> result, this batch
        self.started: Set[str] = set()  # tool_use_ids whose handler was called, this batch
        self.user_signal = signal
        self.poll = needs_polling(signal)
        # Fires on abort and on interrupt: ToolContext.signal and ModelRequest.signal.
        self.controller = AbortController()
        self._unlink: Optional[Callable[[], None]] = None
        self._request_done: Callable[[], None] = _nothing
        if signal is not None and not self.poll:
            callback = signal.add_callback(self.abort_from_user)
            self._unlink = lambda: signal.remove_callback(callback)

    # -- the end ---------------------------------------------------------------------
    def _end(self, end: End) -> bool:
        """Record the end if none yet (caller holds ``cond``)."""
        if self.ended is not None:
            return False
        self.ended = end
        self.cond.notify_all()
        return True

    def end(self, end: End) -> bool:
        with self.cond:
            won = self._end(end)
        if won and end.kind != "finish":
            self.controller.abort(end.error if end.error is not None else end.kind)
        return won

    def user_aborted(self) -> bool:
        return self.user_signal is not None and self.user_signal.aborted

    def abort_from_user(self) -> None:
        """End the query because the caller's signal fired, with an ``AbortError`` that
        carries its reason."""
        reason = self.user_signal.reason if self.user_signal is not None else None
        self.end(End("abort", reason if isinstance(reason, AbortError) else
                     AbortError(str(reason) if reason is not None else "aborted")))

    def interrupt(self) -> None:
        """During a model request: end now. Otherwise: the loop ends at its next check."""
        with self.cond:
            self.interrupted = True
            if self.phase == MODEL:
                self._end(End("interrupt"))
            self.cond.notify_all()
        self.controller.abort(LatticeError("interrupted"))

    def release(self) -> None:
        """Drop the link to the caller's signal (a long-lived signal must not pile up
        callbacks from finished queries), and cancel the deadline of a request the query
        stopped waiting for (its timer would keep this run alive until it was due)."""
        with self.cond:
            done, self._request_done = self._request_done, _nothing
        done()
        if self._unlink is not None:
            self._unlink()
            self._unlink = None

    # -- worker side -------------------------------------------------------------------
    def commit(self, write: Optional[Callable[[], T]] = None, item: Any = None) -> Optional[T]:
        """Run ``write`` and hand ``item`` to the consumer, together, unless the query has
        ended (then raise ``Stopped``).

        When gated (``query()``), wait until the consumer asks for the next item: a query
        suspended at a ``yield`` is still running, so what the consumer does while holding
        ``item`` (an interrupt, an abort, closing the generator) happens before the loop
        goes on. ``prompt()`` has no consumer in between and never waits here.
        """
        with self.cond:
            if self.ended is not None:
                raise Stopped
            self.phase = IDLE
            # The write (history and store I/O) runs without ``cond``: an abort, a deadline
            # (on the shared timer thread) or the consumer never waits for a slow store.
            # The end may come meanwhile; the write still completes, and whoever reads or
            # repairs the history after the end waits for it (``writing``).
            self.writing += 1
        try:
            written = write() if write is not None else None
        except BaseException:
            with self.cond:
                self.writing -= 1
                self.cond.notify_all()
            raise
        with self.cond:  # one acquisition: done writing, hand the item over, maybe wait
            self.writing -= 1
            if item is not None and self.collect:
                self.queue.append(item)  # it is in the history: yield it, even after the end
                self.emitted += 1
            self.cond.notify_all()
            if item is not None and self.collect and self.gated:
                mine = self.emitted
                while self.requested <= mine and self.ended is None:
                    self.cond.wait()
            if self.ended is not None:
                raise Stopped
            return written

    def emit(self, item: Any) -> None:
        """Hand ``item`` (a stream event) to the consumer, if the query still runs."""
        with self.cond:
            if self.ended is None and self.collect:
                self.queue.append(item)
                self.emitted += 1  # the consumer counts it when it takes it: keep in step
                self.cond.notify_all()

    def start_model(self, timeout_ms: Optional[int]) -> AbortSignal:
        """Enter a model request; returns its signal (fires on abort, interrupt, deadline)."""
        with self.cond:
            if self.ended is not None:
                raise Stopped
            if self.interrupted:
                self._end(End("interrupt"))
                raise Stopped
            self.phase = MODEL
            self.request_no += 1
            if timeout_ms is None:
                self.deadline = None
                return self.controller.signal
            self.deadline = time.monotonic() + timeout_ms / 1000.0
            number = self.request_no
        request = AbortController()
        parent = self.controller.signal
        link = parent.add_callback(lambda: request.abort(parent.reason))
        error = RequestTimeoutError(f"model request timed out after {timeout_ms} ms")

        def expire() -> None:
            with self.cond:
                if self.phase != MODEL or self.request_no != number:
                    return
                won = self._end(End("timeout", error))
            request.abort(error)
            if won:
                self.controller.abort(error)

        cancel_timer = call_later(timeout_ms / 1000.0, expire)

        def done() -> None:
            cancel_timer()
            parent.remove_callback(link)

        with self.cond:
            if self.ended is None:
                self._request_done, done = done, _nothing
        done()  # the query ended meanwhile: nothing else would cancel the timer
        return request.signal

    def finish_model(self) -> None:
        """Leave the model request: a reply that comes after the deadline lost the race."""
        with self.cond:
            if self.ended is not None:
                raise Stopped
            if self.deadline is not None:
                self._request_done()
                self._request_done = _nothing
                if time.monotonic() > self.deadline:
                    self._end(End("timeout", RequestTimeoutError(
                        "model request timed out (the reply came after the deadline)")))
                    raise Stopped
            self.phase = IDLE

    def start_tools(self) -> None:
        with self.cond:
            if self.ended is not None:
                raise Stopped
            self.phase = TOOLS
            self.partial = {}
            self.started = set()

    def record(self, tool_use_id: str, block: Dict[str, Any]) -> None:
        with self.cond:
            self.partial[tool_use_id] = block

    # -- consumer side -----------------------------------------------------------------
    def next_item(self) -> Any:
        """The next yielded item, or None once the query has ended and all are taken."""
        with self.cond:
            self.requested += 1
            self.cond.notify_all()
            while not self.queue and (self.ended is None or self.writing):
                if not self.poll or self.ended is not None:
                    self.cond.wait()
                elif not self.cond.wait(EVENT_POLL_S) and self.user_aborted():
                    break
            if self.queue:
                return self.queue.popleft()
            if self.ended is not None:
                return None
        self.abort_from_user()  # a polled Event fired
        with self.cond:
            return self.queue.popleft() if self.queue else None
