"""The lockstep handoff between a query's worker thread and its consumer: ``Handoff``, the
base of ``QueryRace`` (lattice/query/race.py), and the doorbells each side sleeps on.

``query()``'s lockstep hands each history message between two threads, twice per tool turn,
so the cost of a wake-up is most of what ``query()`` costs above ``prompt()``. Round trips
between two threads on one core, measured on a 2-vCPU VM: ``Condition`` about 20 us (a
fresh waiter lock, a list of waiters, Python frames on every wait and notify), a raw lock
about 15 us, an eventfd or a pipe about 7 us (bench/loop_overhead.py prints the first and
the last): a lock is released with the GIL held, so the thread it wakes often runs only to
find the GIL taken and sleeps again, while an eventfd or a pipe is written with the GIL
released. When the two threads sit on two cores, waking the other one dominates (about
70 us a round trip on that VM, whatever the primitive). ``prompt()`` hands over once per
query: its consumer sleeps on a lock, which costs no file descriptor.

A doorbell carries no state: it only says that something the sleeper waits for may have
changed. The ringer changes the state first, then rings; the sleeper looks at the state
under the lock that guards it, and sleeps only if nothing is there yet. A ring stays until
the sleeper takes it, so one that comes between the look and the sleep is not lost; one
nobody needed (or a signal that cuts a sleep short) costs a spurious wake-up, which is one
more look. Ringing never blocks and may come from any thread, a signal handler included,
any number of times.

``fast_doorbell()`` makes the fd kind (an eventfd on Linux with Python 3.10+, a pipe on
other POSIX systems), falling back to the lock kind (Windows, or no descriptor left). Its
descriptors are closed when the doorbell is garbage, never earlier: a late ringer (a
timer, a worker that lost the race) holds a reference, so it can never write into a
descriptor number that was closed and reused.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Union

from ..cancellation import AbortSignal, needs_polling
from .endings import Ending

__all__ = ["Handoff", "Stopped", "EVENT_POLL_S", "Doorbell", "FdDoorbell", "fast_doorbell"]

EVENT_POLL_S = 0.02
NEVER = 1 << 62  # more requests than any query makes


class Stopped(BaseException):
    """Raised in the worker when the query already ended: the worker just unwinds.

    A BaseException so that handler-style ``except Exception`` blocks let it through.
    """


class Doorbell:
    """A raw lock kept locked while nobody rang: ``ring`` releases it, ``wait`` takes it."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()  # locked: not rung

    def ring(self) -> None:
        """Wake the sleeper (or its next ``wait``); never blocks."""
        try:
            self._lock.release()
        except RuntimeError:  # rung already and not taken yet: once is enough
            pass

    def wait(self, timeout: float = -1) -> bool:
        """Sleep until rung (at most ``timeout`` seconds if given); True if rung."""
        return self._lock.acquire(True, timeout)


# One entry per FdDoorbell made and not yet garbage: list append/pop are atomic under the
# GIL (a ``+= 1`` is not), and a pop in ``__del__`` cannot deadlock the way a lock could.
_ALIVE: List[None] = []


class FdDoorbell:
    """An eventfd (Linux) or a pipe: rung by a write, taken by a read of every ring.

    At most ``MAX_ALIVE`` exist at a time in a process: a server streaming hundreds of
    ``query()`` runs at once must not spend the descriptors its sockets need, so the
    others get lock doorbells (``fast_doorbell``)."""

    __slots__ = ("_read", "_write", "_eventfd")
    use_eventfd = hasattr(os, "eventfd")  # Linux, Python 3.10+ (tests try the pipe too)
    MAX_ALIVE = 64

    def __init__(self) -> None:
        self._read = self._write = -1
        self._eventfd = self.use_eventfd
        if self._eventfd:
            self._read = self._write = os.eventfd(0)  # a counter: a write never blocks
        else:
            self._read, self._write = os.pipe()
        _ALIVE.append(None)  # (``__del__`` takes it back whenever the descriptors exist)
        if not self._eventfd:
            os.set_blocking(self._write, False)  # full means rung: never block a ringer

    def ring(self) -> None:
        """Wake the sleeper (or its next ``wait``); never blocks."""
        if self._eventfd:
            os.eventfd_write(self._write, 1)
            return
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:  # the pipe is full of rings nobody took yet
            pass

    def wait(self, timeout: float = -1) -> bool:
        """Sleep until rung (at most ``timeout`` seconds if given); True if rung, or if a
        signal cut the sleep short (its handler runs next; the caller looks again)."""
        if timeout >= 0:
            import select  # only here: ``import lattice`` need not load it

            poller = select.poll()
            poller.register(self._read, select.POLLIN)
            if not poller.poll(timeout * 1000.0):
                return False
        try:
            if self._eventfd:
                os.eventfd_read(self._read)  # takes every ring at once
            else:
                os.read(self._read, 4096)
        except InterruptedError:  # eventfd_read does not retry after a signal (PEP 475)
            pass
        return True

    def __del__(self, close: Callable[[int], None] = os.close) -> None:
        # Only when unreachable: nobody can ring it any more (see the module docstring).
        if self._read < 0:
            return  # (it failed to open)
        if _ALIVE:
            _ALIVE.pop()
        for fd in {self._read, self._write}:
            if fd >= 0:
                close(fd)


def fast_doorbell() -> Union[Doorbell, FdDoorbell]:
    """An ``FdDoorbell`` where the system has one to spare, else a ``Doorbell``."""
    if os.name != "posix" or len(_ALIVE) >= FdDoorbell.MAX_ALIVE:
        return Doorbell()
    try:
        return FdDoorbell()
    except OSError:  # e.g. out of file descriptors: slower, never wrong
        return Doorbell()


class Handoff:
    """The items a query's worker hands its consumer, and the query's end.

    ``cond`` (re-entrant: a SIGINT handler may call ``interrupt()`` on a thread that holds
    it) guards these fields and ``QueryRace``'s, except ``user_signal``/``poll``/``lockstep``
    (set once) and the two doorbells (rung from any thread, each waited on by one side).
    The consumer sleeps on ``_consumer`` for an item or the end, rung by the worker and by
    every end (``_end``: the loop's, an abort, a request deadline on the shared timer
    thread, ``interrupt()``, the consumer closing); the worker, at a ``yield``, sleeps on
    ``_worker`` for the next request or the end, rung by ``next_item`` and every end. A
    bare ``threading.Event`` signal cannot call back and is polled every ``EVENT_POLL_S``.
    Who writes what:

    - ``ended``: first writer wins (``_end``); worker (finish, raise), consumer (close),
      any thread (abort, interrupt during a model call, the deadline timer). Never reset.
    - ``queue``, ``emitted``: the worker appends; the consumer pops.
    - ``requested``: the consumer, each time it asks for the next item (lockstep).
    - ``awaited``: the worker at a yield: the items it handed over (``NEVER`` when it does
      not wait); ``asleep``: the consumer found nothing to take. Each is set together with
      the look that found nothing to do, so whoever changes that state knows to ring.
    """

    def __init__(self, signal: Optional[AbortSignal], *, lockstep: bool) -> None:
        self.cond = threading.RLock()  # the guard; the sides sleep on the doorbells
        self.lockstep = lockstep  # query(): a consumer reads every item; prompt(): nobody
        # query() hands over twice a tool turn: the fastest bells; prompt() once, at the end
        self._consumer = fast_doorbell() if lockstep else Doorbell()
        self._worker = fast_doorbell() if lockstep else Doorbell()
        self.queue: Deque[Any] = deque()
        self.ended: Optional[Ending] = None
        self.requested = self.emitted = 0
        self.awaited, self.asleep = NEVER, False
        self.user_signal = signal
        self.poll = needs_polling(signal)

    def _end(self, ending: Ending) -> bool:
        """Record the end if none yet (caller holds ``cond``)."""
        if self.ended is not None:
            return False
        self.ended = ending
        self._consumer.ring()
        self._worker.ring()
        return True

    def user_aborted(self) -> bool:
        return self.user_signal is not None and self.user_signal.aborted

    def abort_from_user(self) -> None:
        raise NotImplementedError  # QueryRace: end the query as the caller's signal says

    # -- worker side -------------------------------------------------------------------
    def _hand(self, item: Any) -> bool:
        """(Holding ``cond``.) Queue ``item``; True if the consumer sleeps: ring it."""
        self.queue.append(item)
        self.emitted += 1  # the consumer counts it when it takes it: keep in step
        ring, self.asleep = self.asleep, False
        return ring

    def _hand_over(self, mine: int, ring: bool) -> None:
        """Lockstep, after handing over item ``mine``: ring the consumer if it sleeps, then
        sleep until it asks for the next one (what it does while holding the item happens
        before the loop goes on), or the end (then raise ``Stopped``)."""
        if ring:  # rung last, right before sleeping
            self._consumer.ring()
        while True:
            self._worker.wait()
            with self.cond:
                if self.ended is not None:
                    raise Stopped
                if self.requested > mine:
                    self.awaited = NEVER
                    return

    def emit(self, item: Any) -> None:
        """Hand ``item`` (a stream event) to the consumer, if the query still runs."""
        with self.cond:
            if self.ended is not None or not self.lockstep:
                return
            ring = self._hand(item)
        if ring:
            self._consumer.ring()

    # -- consumer side -----------------------------------------------------------------
    def next_item(self) -> Any:
        """The next yielded item, or None once the query has ended and all are taken."""
        with self.cond:
            self.requested += 1
            wake = self.requested > self.awaited  # the worker waits for this very request
        if wake:
            self._worker.ring()
        timeout = EVENT_POLL_S if self.poll else -1
        while True:
            with self.cond:
                if self.queue:
                    self.asleep = False
                    return self.queue.popleft()
                if self.ended is not None:
                    return None
                self.asleep = True  # with the look: whoever hands an item over rings
            if not self._consumer.wait(timeout) and self.user_aborted():
                self.abort_from_user()  # a polled Event fired: nobody else would notice
