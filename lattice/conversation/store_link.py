"""The link between a conversation's messages (``history.py``) and the store behind them.

Memory is the truth; the store follows it. This module is the one store-failure policy
(SPEC 10a, 16a), the same for every store and every store call (``_failed``):

- A message is saved to the store first and kept in memory after, so with
  ``fail_on_error=True`` a failed write raises ``HistoryStoreError`` and is kept nowhere:
  memory, store and what the caller was shown agree.
- With ``fail_on_error=False`` a failure is logged (WARNING, logger ``lattice``, naming the
  cause; one record per query) and the store is left behind for the rest of that query:
  memory only. The next query tries again (``rejoin``, under the session lock): a store
  nobody else wrote meanwhile is rewritten from memory; one somebody else wrote (or one
  this Agent never managed to read) wins, and the unsaved messages are dropped.
- A write the store refuses because another holder took the session over (fencing, SPEC
  18) raises ``LockLostError`` whatever ``fail_on_error`` says; nothing more is written in
  that query (``lost``), and the next query reloads the store (the version is forgotten).
- Store I/O is serialised by ``io`` and never runs under the query's lock. A write that
  finishes after its query ended leaves the store one step ahead of memory; the history
  is then ``diverged`` and the next store operation rewrites the store from memory.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, List, Optional

from ..errors import ConcurrentQueryError, HistoryStoreError, LockLostError
from ..stores.base import describe_store
from ..stores.capabilities import Capabilities
from ..stores.runs import lock_lost
from ..stores.session import SessionHold, hold_session
from .history import History

__all__ = ["StoreLink"]

log = logging.getLogger("lattice")
Message = Dict[str, Any]
_UNREAD: Any = object()  # History.version before the store was first read or written
_UNREAD_AGAIN: Any = object()  # after a lost lock: equal to no version, so stale

# What a lenient failure means, by the store call that failed (the policy's one text).
_CONSEQUENCE = {
    "lock": "this query runs without the session lock",
    "version": "other writers are not looked for this time",
}
_LEFT_BEHIND = "continuing with the in-memory history only until the next query"


class StoreLink:
    """The store behind one Agent's ``History`` (if any), and every call made to it.

    ``home`` is the store the Agent was given; ``store`` is where writes go now: ``home``,
    or None without a store or while a lenient store is left behind (until ``rejoin``).
    Writes go to the store first, then to ``history`` (``append``, ``replace``,
    ``keep_all``).
    """

    def __init__(self, store: Any, history: History) -> None:
        self.history = history
        self.home = store
        self.store = store
        self.caps = Capabilities.of(store)  # what the store can do, asked once
        self.io = threading.Lock()
        self.diverged = False
        # The store's version after this Agent's last read/write (None: the store was empty).
        self.version: Any = _UNREAD
        self.read_once = False  # a load succeeded: the store's content is known
        self.loads = 0  # successful loads: a new one may bring runs another process left
        # ``loads`` when the store was last known to hold no running durable run
        # (durable.Keeper: then a query need not look again until the next load).
        self.no_running_runs_at: Optional[int] = None
        # Written under the session lock since the version was read: nobody else writes
        # while it is held, so the version is read once, before it is given back.
        self.version_behind = False
        self.saved = 0  # while left behind: how many messages of memory the store holds
        self._warned = False  # this query logged its store failure
        self.hold: Optional[SessionHold] = None  # this query's session lock, while held
        self.lost = False  # this query's lock was taken over: it writes nothing more

    def keep_all(self, messages: List[Message]) -> None:
        """Memory becomes ``messages`` (already stored, or a compaction's: while a lenient
        store is left behind, none of the new list is stored)."""
        self.history.keep_all(messages)
        if self.behind:
            self.saved = 0

    def mark_diverged(self) -> None:
        """A write landed after its query ended: the next store operation rewrites the
        store from memory."""
        self.diverged = True

    def runs_closed(self, closed: bool) -> None:
        """Whether the store is now known to hold no durable run left running (each other
        was superseded or ended): then the next query need not look again until the store
        is loaded again."""
        self.no_running_runs_at = self.loads if closed else None

    # -- the failure policy ----------------------------------------------------------------
    def _failed(self, action: str, exc: Exception, strict: bool = False) -> None:
        """The one store-failure rule: raise (``fail_on_error``, or ``strict``: a durable
        run's record, journal and lock, SPEC 21b) or log once per query and leave the store
        behind (a failed lock or version read only logs: the query still writes)."""
        store = self.home
        if strict or getattr(store, "fail_on_error", False):
            raise HistoryStoreError(f"history store {action} failed: {exc} "
                                    f"(store: {describe_store(store)})") from exc
        if action not in _CONSEQUENCE:  # a failed write or load: memory only, this query
            if self.store is not None:  # what the store holds: memory up to here
                self.saved = len(self.history.messages)
                if action != "load":
                    self._own_version()
            self.store = None
        if self._warned:
            return
        self._warned = True
        log.warning("history store %s failed: %s: %s (store: %s); %s", action,
                    type(exc).__name__, exc, describe_store(store),
                    _CONSEQUENCE.get(action, _LEFT_BEHIND), exc_info=exc)

    def _own_version(self) -> None:
        """A failed write may have landed in part (a short write on a full disk): the
        version it left is this Agent's own doing, not another writer's (the session lock
        is held), so ``rejoin`` compares with it. Unreadable (the store is down): the
        version seen before stands."""
        if self.caps.versioned:
            try:
                self.version = self.home.version()
            except Exception:  # noqa: BLE001 - the failure is already being reported
                pass

    def new_query(self) -> None:
        """A query starts: its first store failure is logged again."""
        self._warned = False
        self.lost = False
        self.hold = None

    def check_hold(self) -> None:
        """``LockLostError`` once this query's session lock is known to be lost (a renewal
        found it taken, or the store refused a write): the query ends at its next step."""
        hold = self.hold
        if self.lost or (hold is not None and hold.lost):
            self._lose()
            raise lock_lost(describe_store(self.home))

    def _lose(self) -> None:
        self.lost = True
        self.version = _UNREAD_AGAIN  # someone else wrote: the next query loads again

    @property
    def behind(self) -> bool:
        """A lenient store failed: writes go to memory only until ``rejoin``."""
        return self.store is None and self.home is not None

    # -- the store -----------------------------------------------------------------------
    def save(self, method: str, *args: Any, strict: bool = False) -> Any:
        """Call ``store.<method>(*args)`` under ``io`` and the failure policy (``strict``:
        a failure raises, and so does a store left behind earlier in the query)."""
        if self.store is None:
            self._left_behind(method, strict)
            return None
        with self.io:
            return self._call(method, *args, strict=strict)

    def _left_behind(self, method: str, strict: bool) -> None:
        if strict and self.home is not None:
            raise HistoryStoreError(
                f"history store {method} not attempted: the store failed earlier in this "
                f"query (store: {describe_store(self.home)})")

    def _call(self, method: str, *args: Any, strict: bool = False) -> Any:
        store = self.store
        if store is None or (self.lost and method != "load"):
            if store is None:
                self._left_behind(method, strict)
            return None
        try:
            written = False
            if self.diverged and method != "load":
                store.replace(list(self.history.messages))
                self.diverged = False
                # save_later's message is kept before it is saved: the replace wrote it
                written = method == "append" and \
                    any(m is args[0] for m in self.history.messages[-1:])
            # A load may run without the session lock (get_history between queries): read
            # the version first, so a write landing between the two reads makes it stale.
            before = self._read_version() if method == "load" else None
            out = None if written else getattr(store, method)(*args)
            if self.versioned:
                if method != "load" and self.hold is not None and self.hold.held:
                    self.version_behind = True  # ``settle_version`` reads it, at the end
                else:
                    self.version = before if method == "load" else self._read_version()
                    self.version_behind = False
            if method == "load":
                self.read_once = True
                self.loads += 1
            return out
        except LockLostError:
            self._lose()
            raise
        except Exception as exc:
            self._failed(method, exc, strict)
            return None

    def settle_version(self, *, read: bool = True) -> None:
        """Before the session lock is given back: the version this query's writes left, so
        the next query does not take them for another writer's. ``read=False`` (a query
        cut short, whose end must not wait for its store): forget it instead, and the next
        query loads the store again."""
        if self.version_behind and self.store is not None and not self.lost:
            self.version = _UNREAD_AGAIN
            if read:
                with self.io:
                    try:
                        self.version = self.store.version()
                    except Exception as exc:  # noqa: BLE001 - the query is over: it
                        # only means the next one loads the store again
                        log.warning("history store version read failed: %s: %s (store: "
                                    "%s); the next query loads it again", type(exc).__name__,
                                    exc, describe_store(self.home))
        self.version_behind = False

    def peek(self, method: str, *args: Any, strict: bool = False) -> Any:
        """A read of the store other than ``load`` (run records) under the failure policy;
        it leaves the version alone (None without a store or on a swallowed failure)."""
        store = self.store
        if store is None:
            self._left_behind(method, strict)
            return None
        with self.io:
            try:
                return getattr(store, method)(*args)
            except Exception as exc:
                self._failed(method, exc, strict)
                return None

    def hold_session(self, wait_s: float, *, strict: bool = False) -> SessionHold:
        """The store's session lock (SPEC 14) under the failure policy: a lock that cannot
        be taken for another reason than a busy session raises (``fail_on_error``, or
        ``strict``: a durable run never runs without it, SPEC 21b) or is logged, and the
        query runs without it."""
        try:
            self.hold = hold_session(self.home, wait_s)
            return self.hold
        except ConcurrentQueryError:  # another holder: not a store failure
            raise
        except Exception as exc:
            self._failed("lock", exc, strict)
            return SessionHold(None, self.home)

    def append(self, message: Message) -> None:
        """Save, then keep (outside a query's race)."""
        self.save("append", message)
        self.history.keep(message)

    def replace(self, messages: List[Message]) -> None:
        self.save("replace", list(messages))
        self.keep_all(messages)

    def save_later(self, method: str, *args: Any) -> None:
        """A store write that must not hold up the caller (the repair after an abort): done
        now if the store is free, else in a background thread behind the write in flight."""
        if self.store is None:
            return
        if self.io.acquire(blocking=False):
            try:
                self._call(method, *args)  # fail_on_error: raised once the query has ended
            finally:
                self.io.release()
            return
        self.diverged = True  # the next store operation rewrites the store from memory

    def load(self) -> Optional[List[Message]]:
        """What the store holds (None without a store or on a swallowed failure)."""
        loaded = self.save("load")
        return None if loaded is None else list(loaded)

    @property
    def versioned(self) -> bool:
        """Writes go to a store with ``version()`` (not while a lenient one is left behind)."""
        return self.store is not None and self.caps.versioned

    def unchanged_since(self, loads: int) -> bool:
        """Nobody else wrote the store since the ``loads``-th load: the query's catch-up
        read its version and found it as this Agent last left it (a store without
        ``version()`` cannot tell: False)."""
        return self.versioned and loads == self.loads and self.version is not _UNREAD \
            and self.version is not _UNREAD_AGAIN

    def _read_version(self) -> Any:
        """``store.version()``; None without one or if it failed (the policy: logged)."""
        if not self.versioned:
            return None
        try:
            return self.store.version()
        except Exception as exc:
            self._failed("version", exc)
            return None

    def stale(self) -> bool:
        """Whether someone else wrote the store since this Agent last read or wrote it.
        A store whose version cannot be read is not stale: a store that is down never
        makes the Agent drop the history it holds."""
        if not self.versioned or self.version is _UNREAD:
            return False
        try:
            return bool(self.store.version() != self.version)
        except Exception as exc:
            self._failed("version", exc)
            return False

    # -- a lenient store comes back ----------------------------------------------------------
    def rejoin(self) -> Optional[List[Message]]:
        """At a query's start (under the session lock), try a store left behind again.

        Nobody else wrote it meanwhile (its ``version()`` is the one this Agent last saw, or
        it has none): it is rewritten from memory, and None is returned. Somebody did, or
        this Agent never managed to read it: the store wins, and what it holds is returned
        (memory's unsaved messages are dropped). Each is a WARNING. If it still fails, the
        failure policy applies (one WARNING per query) and None is returned.
        """
        store, was_read = self.home, self.read_once
        versioned = self.caps.versioned
        try:
            with self.io:
                now = store.version() if versioned else None
                if self.read_once and (not versioned or now == self.version):
                    store.replace(list(self.history.messages))
                    self.diverged, self.store = False, store
                    self.version = self._read_version() if versioned else self.version
                    log.warning("history store %s is back: rewritten from memory (%d "
                                "messages)", describe_store(store), len(self.history.messages))
                    return None
                loaded = list(store.load())
                self.version, self.read_once = now, True
                self.diverged, self.store = False, store
        except Exception as exc:
            self._failed("replace" if was_read else "load", exc)
            return None
        dropped = max(0, len(self.history.messages) - self.saved)
        log.warning("history store %s is back, but %s: it wins (loaded), %d unsaved "
                    "messages dropped", describe_store(store),
                    "was written meanwhile" if was_read else "was never read", dropped)
        return loaded
