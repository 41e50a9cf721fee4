"""The SQLite store's session lock: a lease row that expires unless its holder renews it.

SQLite has no lock that outlives one transaction and dies with its process, so the holder
writes ``(session_id, owner, expires_at)`` into ``lattice_history_leases`` and one daemon
thread per process pushes the ``expires_at`` of every lease it holds forward every
``RENEW_S``. A holder killed with ``kill -9``
stops renewing, and its lease is free ``TTL_S`` seconds later at most. Times are wall-clock
seconds (``time.time()``), comparable between the processes of one host.

The ``owner`` is the holder's description (``holder.describe``: host, boot id, pid, process
start time). A process that finds the lease held by a process of its own host that is known
to be dead takes it over at once (SPEC 21b): a redelivered job or a restarted service does
not wait out a ``kill -9``ed holder's ``TTL_S``.

A lease can be outlived: a holder paused past ``TTL_S`` (SIGSTOP, a frozen VM, a tool holding
the GIL) finds the session taken when it goes on. So taking a lease raises the session's
fencing token (``sqlite_runs.bump_fence``) in the same transaction, and while the lease is
held the store checks the token in each write's own transaction: the paused holder's writes
are refused (``LockLostError``), and a renewal that finds the lease gone marks it ``lost``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Optional

from .base import logger
from .holder import describe, is_dead
from .locks import poll
from .sqlite_runs import Naming, bump_fence

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteLease", "transaction", "LEASE_SCHEMA", "TTL_S", "RENEW_S"]

TTL_S = 5.0
RENEW_S = 1.0

LEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS lattice_history_leases (
    session_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL
)"""


class transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` on error.

    IMMEDIATE takes the write lock up front: a deferred transaction that reads first could
    find its snapshot stale when it starts writing, and that error does not wait.
    """

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *rest: object) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
            return
        try:
            self.conn.execute("ROLLBACK")
        except Exception:
            pass  # the first error matters; the connection is closed, not pooled, anyway


class SqliteLease:
    """``with SqliteLease(store, wait_s)``: hold the session's lease.

    ``store`` is the ``SqliteHistoryStore``: its ``_pool`` gives a connection for one
    operation, and its ``_hold`` is this lease while held, so its writes carry ``token``.
    ``lost`` turns True once a renewal finds the lease taken.
    """

    def __init__(self, store: Any, wait_s: float) -> None:
        self.store = store
        self.pool = store._pool
        self.session_id: str = store.session_id
        self.wait_s = wait_s
        self.what: str = store._where()
        self.owner = describe(os.urandom(8).hex())
        self.held = False
        self.lost = False
        self.token = 0
        self._failures = 0

    def __enter__(self) -> SqliteLease:
        with Naming(self.what):
            poll(self._try_take, self.wait_s, self.what)
        self.held = True
        self.store._hold = self
        _renewer.add(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self.held:
            return
        self.held = False
        if self.store._hold is self:
            self.store._hold = None
        _renewer.discard(self)
        with self.pool.borrow() as conn:
            conn.execute(
                "DELETE FROM lattice_history_leases WHERE session_id = ? AND owner = ?",
                (self.session_id, self.owner),
            )

    def _try_take(self) -> bool:
        now = time.time()
        with self.pool.borrow() as conn, transaction(conn):
            conn.execute(
                "DELETE FROM lattice_history_leases WHERE session_id = ? AND expires_at < ?",
                (self.session_id, now),
            )
            cursor = conn.execute(
                "INSERT OR IGNORE INTO lattice_history_leases VALUES (?, ?, ?)",
                (self.session_id, self.owner, now + TTL_S),
            )
            if cursor.rowcount != 1 and not self._take_from_dead(conn):
                return False
            self.token = bump_fence(conn, self.session_id)
            return True

    def _take_from_dead(self, conn: sqlite3.Connection) -> bool:
        """In ``_try_take``'s transaction: replace a lease whose holder is known to be
        dead with ours; False if the holder may be alive."""
        row = conn.execute("SELECT owner FROM lattice_history_leases WHERE session_id = ?",
                           (self.session_id,)).fetchone()
        if row is None or not is_dead(str(row[0])):
            return False
        cursor = conn.execute(
            "UPDATE lattice_history_leases SET owner = ?, expires_at = ? "
            "WHERE session_id = ? AND owner = ?",
            (self.owner, time.time() + TTL_S, self.session_id, row[0]))
        if cursor.rowcount == 1:
            logger.info("%s: took over the session lease of a dead holder %s", self.what,
                        row[0])
        return bool(cursor.rowcount == 1)

    def renew(self) -> bool:
        """Push the expiry forward; False once the lease is no longer ours."""
        try:
            with self.pool.borrow() as conn:
                cursor = conn.execute(
                    "UPDATE lattice_history_leases SET expires_at = ? "
                    "WHERE session_id = ? AND owner = ?",
                    (time.time() + TTL_S, self.session_id, self.owner),
                )
            kept = bool(cursor.rowcount == 1)
        except Exception:
            self._failures += 1
            if self._failures == 1:
                logger.warning("%s: renewing the session lease failed; retrying", self.what,
                               exc_info=True)
            return True
        if not kept and self.held:  # expired and taken: this process stalled past TTL_S
            self.lost = True
            logger.warning("%s: the session lease expired while held (the process was "
                           "stalled for over %g s); another query may run, and this one "
                           "ends at its next step", self.what, TTL_S)
        return kept


class _Renewer:
    """One daemon thread renewing every lease this process holds, every ``RENEW_S``.

    Shared rather than a thread per lease: starting a thread costs more than the lease's
    SQL. The thread ends when nothing is held and starts again with the next lease.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held: Dict[int, SqliteLease] = {}
        self._thread: Optional[threading.Thread] = None

    def add(self, lease: SqliteLease) -> None:
        with self._mutex:
            self._held[id(lease)] = lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lattice-lease",
                                                daemon=True)
                self._thread.start()

    def discard(self, lease: SqliteLease) -> None:
        with self._mutex:
            self._held.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            time.sleep(RENEW_S)
            with self._mutex:
                leases = list(self._held.values())
                if not leases:
                    self._thread = None
                    return
            for lease in leases:
                if not lease.renew():
                    self.discard(lease)

    def after_fork(self) -> None:
        """In a forked child: the parent's thread and leases are not ours."""
        self._mutex = threading.Lock()
        self._held = {}
        self._thread = None


_renewer = _Renewer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renewer.after_fork)
