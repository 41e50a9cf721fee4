"""Where a query starts and ends: the conversation one ``Agent`` holds, as a ``Query`` sees it.

A ``Query`` (query.py) talks only to this object, never to the Agent: the history
(history.py) and its link to the store (store_link.py), loading the store once, the
one-query guard, the store's session lock and how long to wait for it, and the running
query's ``QueryRace`` (so that ``interrupt()`` and ``get_history()`` reach it). The Agent
keeps its options and tools.

Start and end, in order: ``start`` (the guard; a busy Agent raises
``ConcurrentQueryError``), ``hold_session`` (the store's lock, once this Agent's own last
write has landed), ``catch_up`` (load, reload, or bring back a store left behind), the
query's own work, then ``end`` (the lock is given back once no write of the query is in
flight; the guard at once).
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Dict, List, Optional

from ..cancellation import AbortSignal
from ..durable.runs import running_runs
from ..errors import ConcurrentQueryError
from ..query.race import EVENT_POLL_S, QueryRace
from ..query.settings import QuerySettings
from ..stores.repair import repair_history
from ..stores.session import SessionHold
from ..tools import approval
from ..tools.definition import ToolCall
from .history import History
from .store_link import StoreLink

__all__ = ["Conversation"]

Message = Dict[str, Any]


class Conversation:
    """One Agent's conversation: its history, its store's lock, and the query running on it.

    ``run`` is set while a query holds the guard (between ``start`` and ``end``); it is read
    unlocked by ``interrupt()`` and ``snapshot()``, which cope with either value.
    """

    def __init__(self, store: Any, lock_wait_s: float) -> None:
        self.history = History()
        self.link = StoreLink(store, self.history)
        self.lock_wait_s = lock_wait_s
        self.guard = threading.Lock()
        self.race: Optional[QueryRace] = None
        self._loaded = store is None
        self._load_lock = threading.Lock()
        # Set when the last query's session lock was given back (after its last write).
        # Locked until the last store write of this Agent's previous query has landed (a
        # raw lock, not an Event: one per query, and an Event costs a Condition to make).
        self._landed: Optional[Any] = None

    # -- a query's start and end ---------------------------------------------------------
    def start(self, signal: Optional[AbortSignal], *, lockstep: bool) -> QueryRace:
        """Take the guard and make the query's ``QueryRace`` (``interrupt()`` applies from
        now). Raises ``ConcurrentQueryError`` when a query is running."""
        if not self.guard.acquire(blocking=False):
            raise ConcurrentQueryError("this Agent is already running a query; create one "
                                       "Agent per conversation")
        try:
            self.race = QueryRace(signal, lockstep=lockstep)
        except BaseException:
            self.guard.release()
            raise
        self.link.new_query()
        return self.race

    def hold_session(self, race: QueryRace, *, strict: bool = False) -> Optional[SessionHold]:
        """The store's session lock (SPEC 14), held until ``end``. This Agent's own last
        write, still in flight after an early end, is not another query: wait for it to
        land (it gives the lock back) instead of raising ``ConcurrentQueryError``. The
        query's signal still bounds the wait: None if ``run`` ended meanwhile."""
        landed = self._landed
        if landed is not None:
            while not landed.acquire(timeout=EVENT_POLL_S):
                if race.user_aborted():  # a polled Event: nobody else would notice
                    race.abort_from_user()
                if race.ended is not None:
                    return None
            landed.release()  # (it stays landed for whoever looks next)
        return self.link.hold_session(self.lock_wait_s, strict=strict)

    def catch_up(self) -> None:
        """Under the session lock, before the query writes: load the store if not yet done
        or someone else wrote it; a lenient store left behind by a failure is tried again
        (store_link.py: rewritten from memory, or it wins)."""
        link = self.link
        if link.behind:
            loaded = link.rejoin()
            if loaded is not None:
                self._keep_loaded(loaded)
            return
        self.ensure_loaded(again=link.stale())

    def end(self, lock: Optional[SessionHold]) -> None:
        """Give back the session lock once no store write of the query is in flight (the
        caller does not wait for it), then the guard."""
        race = self.race
        try:
            if race is not None:
                race.release()
                if lock is not None and lock.held:
                    landed = threading.Lock()
                    landed.acquire()
                    self._landed = landed
                    ended, link = race.ended, self.link
                    read = ended is None or not ended.traits.cancels

                    def give_back() -> None:
                        try:
                            link.settle_version(read=read)
                            lock.release()
                        finally:
                            landed.release()

                    race.after_writes(give_back)
        finally:  # even if a KeyboardInterrupt lands above
            self.race = None
            self.guard.release()

    # -- the history ---------------------------------------------------------------------
    def ensure_loaded(self, *, again: bool = False) -> None:
        """Load the store once (or ``again``, when someone else wrote it), repaired so it can
        be sent; a failed load is tried again next time."""
        if self._loaded and not again:  # set once, never reset: no lock needed to read it
            return
        with self._load_lock:
            if self._loaded and not again:
                return
            loaded = self.link.load()  # a fail_on_error store raises: retried next time
            self._loaded = True
            if loaded is not None or not self.link.behind:  # failed: memory goes on
                self._keep_loaded(loaded or [])

    def _keep_loaded(self, loaded: List[Message]) -> None:
        messages, changed = repair_history(loaded)
        self.link.keep_all(messages)
        # The store gets the repair, unless a durable run left running owns the tail: reads
        # never write (SPEC 21a); its resume settles it, or another query supersedes it.
        if changed and not self._run_left_running():
            self.link.save("replace", list(messages))

    def _run_left_running(self) -> bool:
        try:
            return bool(running_runs(self.link))
        except Exception:  # noqa: BLE001 - cannot tell: then do not write (reads never write)
            return True

    def snapshot(self) -> List[Message]:
        """A deep copy of the history (consistent even while a query writes it)."""
        self.ensure_loaded()
        race = self.race
        if race is None:
            return self.history.snapshot()
        with race.cond:
            return self.history.snapshot()

    def replace(self, messages: List[Message]) -> None:
        """Replace the history and the store's copy; only while no query runs."""
        if not self.guard.acquire(blocking=False):
            raise ConcurrentQueryError("replace_history() while a query is running")
        try:
            with self._load_lock:
                self._loaded = True
            self.link.replace(copy.deepcopy(messages))
            self.history.forget_usage()
        finally:
            self.guard.release()

    def pending_calls(self, settings: QuerySettings, owner: Any) -> List[ToolCall]:
        """The calls of the last reply that wait for a decision (loads the store first);
        ``owner`` (the Agent) is what their ``ToolContext.agent`` holds."""
        self.ensure_loaded()
        pending = approval.pending_calls(self.history.messages, settings, owner)
        if pending and self.link.caps.records_runs:
            # An approved call journaled as started is no longer pending (SPEC 17): after a
            # crash, the next query settles it by the journal instead.
            started = {i for r in running_runs(self.link) for i in r.started_calls}
            pending = [c for c in pending if c.id not in started]
        return pending
