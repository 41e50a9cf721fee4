"""Abort signals: a thread-safe flag with a reason, callbacks, and a way to wait on it.

``AbortSignal.timeout(ms)`` and request deadlines share one lazily started daemon timer
thread (a heap), so ten thousand timed queries cost one thread, not ten thousand.
A plain ``threading.Event`` is accepted wherever a signal is (see ``as_signal``); it has no
callbacks, so whoever waits on one polls it in short slices.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
import weakref
from functools import partial
from typing import Any, Callable, List, Optional, Tuple, Union

from .errors import AbortError

__all__ = ["AbortSignal", "AbortController", "SignalLike", "as_signal", "call_later"]

Callback = Callable[[], None]


class AbortSignal:
    """Tells whether (and why) an operation should stop. Made by ``AbortController``."""

    __slots__ = ("_lock", "_aborted", "_reason", "_callbacks", "_event", "__weakref__")

    def __init__(self) -> None:
        # Re-entrant: abort() may be called from a signal handler that interrupted this
        # very thread inside one of these critical sections.
        self._lock = threading.RLock()
        self._aborted = False
        self._reason: Any = None
        self._callbacks: List[Callback] = []
        self._event: Optional[threading.Event] = None

    # -- reading ------------------------------------------------------------------
    @property
    def aborted(self) -> bool:
        """True once the signal has fired."""
        return self._aborted

    @property
    def reason(self) -> Any:
        """What ``abort(reason)`` was given (an ``AbortError`` when it was given nothing)."""
        return self._reason

    def throw_if_aborted(self) -> None:
        """Raise the reason (or an ``AbortError``) if the signal has fired."""
        if self._aborted:
            reason = self._reason
            raise reason if isinstance(reason, BaseException) else AbortError(str(reason))

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until the signal fires or ``timeout`` seconds pass; return ``aborted``."""
        if self._aborted:
            return True
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
                if self._aborted:
                    self._event.set()
            event = self._event
        return event.wait(timeout)

    # -- callbacks ----------------------------------------------------------------
    def add_callback(self, callback: Callback) -> Callback:
        """Call ``callback()`` when the signal fires (at once if it already has).

        Returns the callback, so it can be given to ``remove_callback`` later.
        """
        with self._lock:
            if not self._aborted:
                self._callbacks.append(callback)
                return callback
        callback()
        return callback

    def remove_callback(self, callback: Callback) -> None:
        """Forget a callback (no error if it is unknown or already called)."""
        with self._lock:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

    # -- firing (AbortController's job) --------------------------------------------
    def _fire(self, reason: Any) -> bool:
        with self._lock:
            if self._aborted:
                return False
            self._reason = reason
            self._aborted = True
            callbacks, self._callbacks = self._callbacks, []
            if self._event is not None:
                self._event.set()
        # One failing callback must not keep the others (e.g. a running query's) from
        # hearing of the abort: an Exception is logged, a BaseException re-raised at the end.
        error: Optional[BaseException] = None
        for callback in callbacks:
            try:
                callback()
            except Exception:
                import logging

                logging.getLogger("lattice").exception("abort signal callback failed")
            except BaseException as exc:  # noqa: B036 - re-raised below
                if error is None:
                    error = exc
        if error is not None:
            raise error
        return True

    # -- constructors ---------------------------------------------------------------
    @staticmethod
    def timeout(ms: Union[int, float]) -> AbortSignal:
        """A signal that aborts itself with an ``AbortError``
        after ``ms`` milliseconds."""
        if (isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms)
                or ms < 0):
            raise ValueError(f"AbortSignal.timeout(ms) needs a finite non-negative number, "
                             f"got {ms!r}")
        controller = AbortController()
        call_later(ms / 1000.0, lambda: controller.abort(AbortError(f"timed out after {ms} ms")))
        return controller.signal

    @staticmethod
    def any(signals: List[SignalLike]) -> AbortSignal:
        """A signal that fires when the first of ``signals`` fires (with its reason)."""
        sources: List[AbortSignal] = []
        for item in signals:
            sig = as_signal(item)
            if sig is None or isinstance(sig, _EventSignal):
                raise TypeError("AbortSignal.any() takes AbortSignals, not threading.Event")
            sources.append(sig)
        combined = AbortSignal()
        # The sources hold only a weak reference to the combined signal, and forget their
        # callbacks once it fires or is collected: a long-lived source (an app-wide shutdown
        # signal) does not pile up one callback per call.
        target = weakref.ref(combined)
        links: List[Tuple[AbortSignal, Callback]] = [
            (sig, partial(_forward, target, sig)) for sig in sources]
        unlink = partial(_unlink, links)
        weakref.finalize(combined, unlink)
        combined.add_callback(unlink)
        for sig, link in links:
            sig.add_callback(link)
        if combined.aborted:  # a source had fired: links added after that are dropped too
            unlink()
        return combined

    def __repr__(self) -> str:
        state = f"aborted, reason={self._reason!r}" if self._aborted else "not aborted"
        return f"<AbortSignal {state}>"


def _forward(target: weakref.ref[AbortSignal], source: AbortSignal) -> None:
    combined = target()
    if combined is not None:
        combined._fire(source.reason)


def _unlink(links: List[Tuple[AbortSignal, Callback]]) -> None:
    for sig, link in links:
        sig.remove_callback(link)


class AbortController:
    """Owns an ``AbortSignal`` and fires it."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        """Fire the signal (only the first call counts)."""
        self.signal._fire(AbortError("aborted") if reason is None else reason)

    def __repr__(self) -> str:
        return f"<AbortController {self.signal!r}>"


class _EventSignal(AbortSignal):
    """A read-only view of a ``threading.Event`` (it cannot call back: waiters poll it)."""

    __slots__ = ("_source",)

    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self._source = event

    @property
    def aborted(self) -> bool:
        if not self._aborted and self._source.is_set():
            self._fire(AbortError("aborted"))
        return self._aborted

    @property
    def reason(self) -> Any:
        return self._reason if self.aborted else None

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._source.wait(timeout)


SignalLike = Union[AbortSignal, threading.Event]


def as_signal(obj: Optional[SignalLike], name: str = "signal") -> Optional[AbortSignal]:
    """Accept an ``AbortSignal``, a ``threading.Event`` or None."""
    if obj is None or isinstance(obj, AbortSignal):
        return obj
    if isinstance(obj, threading.Event):
        return _EventSignal(obj)
    raise ValueError(f"{name} must be an AbortSignal or a threading.Event, got {obj!r}")


def needs_polling(signal: Optional[AbortSignal]) -> bool:
    """True for signals that cannot call back (a wrapped ``threading.Event``)."""
    return isinstance(signal, _EventSignal)


# -- one shared timer thread ----------------------------------------------------------


class _Timers:
    """A heap of (due, seq, callback) served by one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: List[Tuple[float, int, List[Any]]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._cancelled = 0

    def cancel(self, entry: List[Any]) -> None:
        with self._cond:
            if entry[0] is None:
                return
            entry[0] = None
            self._cancelled += 1
            # Request deadlines are mostly cancelled long before they are due: drop the dead
            # entries once they are most of the heap, so many queries don't grow it.
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [item for item in self._heap if item[2][0] is not None]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def schedule(self, delay: float, callback: Callback) -> List[Any]:
        entry: List[Any] = [callback]
        with self._cond:
            due = time.monotonic() + delay
            heapq.heappush(self._heap, (due, next(self._seq), entry))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="lattice-timers")
                self._thread.daemon = True
                self._thread.start()
            elif self._heap[0][2] is entry:
                self._cond.notify()
        return entry

    def _serve(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    while self._heap and self._heap[0][2][0] is None:
                        heapq.heappop(self._heap)  # cancelled
                        self._cancelled = max(0, self._cancelled - 1)
                    if self._heap and self._heap[0][0] <= now:
                        entry = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            with self._cond:
                callback, entry[0] = entry[0], None
            if callback is not None:
                try:
                    callback()
                except BaseException:  # noqa: B036 - a timer must never die (no one to raise to)
                    import logging

                    logging.getLogger("lattice").exception("timer callback failed")


_timers: Optional[_Timers] = None
_timers_lock = threading.Lock()


def call_later(delay: float, callback: Callback) -> Callable[[], None]:
    """Run ``callback`` on the shared timer thread after ``delay`` seconds.

    Returns a function that cancels it (cheap; safe to call after it ran).
    """
    global _timers
    if _timers is None:
        with _timers_lock:
            if _timers is None:
                _timers = _Timers()
    timers = _timers
    entry = timers.schedule(max(0.0, delay), callback)
    return partial(timers.cancel, entry)
