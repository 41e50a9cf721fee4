"""One running query: its loop in a worker thread, raced by the caller.

The loop runs in one daemon worker per query, so ``prompt()`` costs one thread handoff per
query, not one per turn; ``query()`` pays one per yielded history message, because a query
suspended at a ``yield`` is still running and waits for its consumer (lockstep): two round
trips per tool turn, on doorbells (lattice/query/handoff.py: ``Handoff``, the base of
``QueryRace``, and why not a ``Condition``).

Whoever decides the end first wins, under ``cond``: the worker finishing, an abort, a
deadline, an interrupt during a model request, or the consumer closing the generator.
After that ``commit`` refuses every write, so a late reply from a worker that lost the race
never enters the history. Slow work (the model call, store I/O) runs outside ``cond``, and
nobody waits for it once the query has ended: the signal bounds the whole query.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set

from ..cancellation import AbortController, AbortSignal, call_later
from ..errors import AbortError, LatticeError, RequestTimeoutError
from ..tools.calls import not_run
from . import abandoned as _abandoned
from .abandoned import ABANDONED_AFTER_S, abandoned_workers
from .endings import Ending
from .handoff import EVENT_POLL_S, Handoff, Stopped

__all__ = ["QueryRace", "Stopped", "Phase", "EVENT_POLL_S", "ABANDONED_AFTER_S",
           "abandoned_workers"]

log = logging.getLogger("lattice")


class Phase(enum.Enum):
    """What the worker is doing: what an interrupt or a deadline applies to."""

    IDLE = "idle"  # between steps, or writing to the history
    MODEL = "model"  # in a model request: an interrupt or its deadline ends the query now
    TOOLS = "tools"  # running a batch: an interrupt waits for it (its results are kept)


IDLE, MODEL, TOOLS = Phase.IDLE, Phase.MODEL, Phase.TOOLS


def _nothing() -> None:
    pass


class QueryRace(Handoff):
    """The state the worker and the consumer share for one query.

    ``cond`` (``Handoff``'s, re-entrant) guards every field below except ``controller``
    (thread-safe itself), as it does ``Handoff``'s (``ended``, the items). Who writes what:

    - ``phase``, ``request_no``, ``deadline``: the worker (the timer reads them).
    - ``interrupted``: ``interrupt()`` from any thread; the worker reads it.
    - ``partial``, ``started``: replaced by the worker (``start_tools``) under ``cond``;
      filled by the tool threads of the current batch without it (one atomic dict/set
      store each); the consumer reads them after the end (``unanswered``), to answer every
      call of a cut batch.

    The store-write / session-lock hand-off (the caller never waits for a slow store, yet
    the store's session lock covers every write of the query):

    - ``writing``: True while the worker is inside a store write (``commit``'s ``save``).
      Set under ``cond`` together with the check that the query still runs, so no write
      starts after the end; cleared when the write returns (``_written``), or at ``keep``
      when the query still runs.
    - ``_after_write``: what ``after_writes`` was asked to do once the query has ended while
      a write was in flight (the query's session lock release). The worker runs them, in
      order, when that write returns, whether it succeeded, failed or lost the race.
    - ``_request_done``: cancels the current model request's deadline timer and unlinks its
      signal from the run's. Set by ``start_model``; called once, by whichever comes first
      of ``finish_model`` (the reply came) and ``release`` (the query ended first).
    - ``_unlink``: removes the run's callback from the caller's signal (which may outlive
      many queries); called once, by ``release``.
    """

    def __init__(self, signal: Optional[AbortSignal], *, lockstep: bool) -> None:
        super().__init__(signal, lockstep=lockstep)
        self.phase: Phase = IDLE
        self.request_no = 0  # which model request a deadline belongs to
        self.deadline: Optional[float] = None
        self.interrupted = False
        self.partial: Dict[str, Dict[str, Any]] = {}  # tool_use_id -> result, this batch
        self.started: Set[str] = set()  # tool_use_ids whose handler was called, this batch
        # Fires on abort, interrupt and timeout: ToolContext.signal, ModelRequest.signal.
        self.controller = AbortController()
        self._unlink: Optional[Callable[[], None]] = None
        self._request_done: Callable[[], None] = _nothing
        self.writing = False  # the worker is in a store write (commit's ``save``)
        self.working = False  # the worker thread is running the loop
        # ... and was still running ABANDONED_AFTER_S after the end: counted there
        self.abandoned: Optional[_abandoned.Abandoned] = None
        self._look_again: Callable[[], None] = _nothing  # cancels that look
        self._after_write: List[Callable[[], None]] = []
        # An inline query (lattice/query/inline.py): the loop runs on the consumer's
        # thread, ``commit`` leaves its items in ``stash`` for it, batches go to ``tools``
        # (a ``ToolRunner``; None: a batch runs where the loop runs, in the worker).
        self.stash: Optional[Deque[Any]] = None
        self.tools: Optional[Callable[[Callable[[], Any]], Any]] = None
        if signal is not None and not self.poll:
            callback = signal.add_callback(self.abort_from_user)
            self._unlink = lambda: signal.remove_callback(callback)

    # -- the end -----------------------------------------------------------------------
    def end(self, ending: Ending) -> bool:
        """End the query unless it already ended; True if this call decided the end."""
        with self.cond:
            won = self._end(ending)
        if won and ending.traits.cancels:
            self.controller.abort(ending.error if ending.error is not None
                                  else LatticeError(ending.subtype))
        return won

    def abort_from_user(self) -> None:
        """End the query because the caller's signal fired (the reason, as an AbortError)."""
        reason = self.user_signal.reason if self.user_signal is not None else None
        self.end(Ending("error_abort", error=reason if isinstance(reason, AbortError) else
                        AbortError(str(reason) if reason is not None else "aborted")))

    def interrupt(self) -> None:
        """During a model request: end now. Otherwise the loop ends at its next check."""
        with self.cond:
            self.interrupted = True
            if self.phase is MODEL:
                self._end(Ending("interrupted"))
        self.controller.abort(LatticeError("interrupted"))

    def release(self) -> None:
        """Drop the link to the caller's signal (a long-lived signal must not pile up
        callbacks), and cancel the deadline of a request nobody waits for any more. A worker
        still running is looked at again ``ABANDONED_AFTER_S`` later (abandoned.py)."""
        with self.cond:
            done, self._request_done = self._request_done, _nothing
        done()
        if self._unlink is not None:
            self._unlink()
            self._unlink = None
        if not self.working:  # the usual case: the worker ended the query itself
            return
        with self.cond:  # the worker may be stuck where no signal reaches: look again later
            if self.working:
                registry = _abandoned.REGISTRY
                self._look_again = call_later(_abandoned.ABANDONED_AFTER_S,
                                              lambda: self._check_abandoned(registry))

    # -- the worker thread's life --------------------------------------------------------
    def worker_enter(self) -> None:
        # No lock: a release() that misses it ends the query before the loop's first check.
        self.working = True

    def worker_exit(self) -> None:
        self.working = False
        if self._look_again is _nothing:  # the usual case: no look is due (a look that
            return  # release() schedules from now on finds ``working`` False)
        with self.cond:
            self.working = False
            counted, self.abandoned = self.abandoned, None
            look_again, self._look_again = self._look_again, _nothing
        look_again()  # the timer must not keep this run alive
        if counted is not None:
            counted.remove()

    def _check_abandoned(self, registry: _abandoned.Abandoned) -> None:
        with self.cond:
            if not self.working or self.abandoned is not None:
                return
            self.abandoned = registry
        registry.add()

    # -- worker side -------------------------------------------------------------------
    def check(self) -> None:
        """Before every model request and tool batch: abort and interrupt end the query."""
        if self.user_aborted():
            self.abort_from_user()
            raise Stopped
        if self.interrupted or self.ended is not None:  # read unlocked: both only ever set
            with self.cond:
                if self.interrupted:
                    self._end(Ending("interrupted"))
                raise Stopped

    def commit(self, save: Optional[Callable[[], None]], keep: Callable[[], None],
               item: Any = None, late: Optional[Callable[[], None]] = None) -> None:
        """Write to the history and hand ``item`` to the consumer, unless the query ended
        (then raise ``Stopped``).

        ``save`` (store I/O, slow, may raise) runs without ``cond``; ``keep`` (memory,
        fast) runs under it only if the query is still running, so a write that loses the
        race never reaches the history (the store then holds one message more than memory:
        ``late``, fast, runs instead, so the history resynchronises it). Both happen before
        ``after_writes`` callbacks run. In lockstep, wait until the consumer asks for the
        next item: what it does while holding ``item`` happens before the loop goes on.
        """
        if save is not None:  # without a store, one lock acquisition does it all
            with self.cond:
                if self.ended is not None:
                    raise Stopped
                self.phase = IDLE
                self.writing = True  # decided with the end check: see after_writes
            try:
                save()
            except BaseException:
                self._written()
                raise
        with self.cond:
            running = self.ended is None
            if running:
                self.writing = False  # nothing waits for it: after_writes comes after the end
                self.phase = IDLE
                keep()
                if item is None or not self.lockstep:
                    return
                if self.stash is not None:  # inline: yielded by the loop itself
                    self.stash.append(item)
                    return
                ring = self._hand(item)
                mine = self.awaited = self.emitted
            elif save is not None and late is not None:
                late()
        if running:
            self._hand_over(mine, ring)
            return
        if save is not None:
            self._written()
        raise Stopped

    def _written(self) -> None:
        with self.cond:
            self.writing = False
            later, self._after_write = self._after_write, []
        for fn in later:
            fn()

    def after_writes(self, fn: Callable[[], None]) -> None:
        """Once the query has ended: call ``fn`` when no store write of the worker is in
        flight (now, or from the worker when its write returns). No write starts after the
        end, so the store's session lock released by ``fn`` covers every write of the
        query, while the caller does not wait for a slow store (SPEC 10a, 14)."""
        with self.cond:
            if self.writing:
                self._after_write.append(fn)
                return
        fn()

    def start_model(self, timeout_ms: Optional[int]) -> AbortSignal:
        """Enter a model request; returns its signal (fires on abort, interrupt, deadline)."""
        with self.cond:
            if self.ended is not None:
                raise Stopped
            if self.interrupted:
                self._end(Ending("interrupted"))
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
                if self.phase is not MODEL or self.request_no != number:
                    return
                won = self._end(Ending("error_timeout", error=error))
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
                    self._end(Ending("error_timeout", error=RequestTimeoutError(
                        "model request timed out (the reply came after the deadline)")))
                    raise Stopped
            self.phase = IDLE

    def go_inline(self, tools: Optional[Callable[[Callable[[], Any]], Any]]) -> None:
        """The loop runs on the caller's thread, its batches go to ``tools`` (a
        ``ToolRunner``: lattice/query/inline.py), or run there too (None)."""
        self.stash = deque()
        self.tools = tools

    def start_tools(self) -> None:
        with self.cond:
            if self.ended is not None:
                raise Stopped
            self.phase = TOOLS
            self.partial = {}
            self.started = set()

    def record(self, tool_use_id: str, block: Dict[str, Any]) -> None:
        # One dict store is atomic: no lock on the hot path. The consumer reads ``partial``
        # only after the end, under ``cond``; a result recorded later is not in the repair,
        # exactly as if it had come a moment later under the lock.
        self.partial[tool_use_id] = block

    def mark_started(self, tool_use_id: str) -> None:
        self.started.add(tool_use_id)  # set.add is atomic: no lock on the hot path

    def unanswered(self, uses: List[Dict[str, Any]], why: str) -> List[Dict[str, Any]]:
        """After the end: a ``tool_result`` for each of ``uses`` (the calls of the last
        reply that the history leaves unanswered): the result the batch recorded, or one
        saying the call was cut (its handler had started) or not run, and ``why``."""
        with self.cond:
            partial, started = self.partial, self.started
        blocks: List[Dict[str, Any]] = []
        for use in uses:
            use_id = use.get("id", "")
            done = partial.get(use_id)
            if done is None:
                done = not_run(use_id, "cut" if use_id in started else "ended", why=why)
            blocks.append(done)
        return blocks
