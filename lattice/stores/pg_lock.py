"""The PostgreSQL store's session lock: an advisory lock on a connection kept for the query,
with a fencing token (SPEC 14, 18).

The server frees an advisory lock when its connection ends, so a killed holder frees its
session at once. But a connection can also end under a live holder (``pg_terminate_backend``,
an idle timeout, a failover, a proxy drop): the lock is gone, and another process may take
the session. So:

* taking the lock raises the session's fencing token (``Tables.bump``) on the lock's
  connection, and every write the store makes while held carries the token in its own
  statement (``... WHERE newest token <= ours``), so a write after a takeover is refused;
* while held, statements run on the lock's connection. When it is found dead, the lock is
  taken again on a new connection, and kept only if the token is still ours (nobody held
  the session in between); otherwise the hold is ``lost``: writes raise ``LockLostError``,
  reads go to the pool.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple, TypeVar

from .idle import Loan
from .locks import poll
from .pg_driver import Connection, connection_lost, ended_by_server, sqlstate
from .pg_sql import UNDEFINED_TABLE, fetch, in_transaction, roll_back, single
from .runs import lock_lost

if TYPE_CHECKING:
    from .postgres import PostgresHistoryStore

__all__ = ["AdvisoryLock"]

T = TypeVar("T")


def _try_lock(conn: Connection, key: int) -> bool:
    rows = single(conn, lambda cur: fetch(cur, "SELECT pg_try_advisory_lock(%s)", (key,)))
    return bool(rows[0][0])


class AdvisoryLock:
    """The context manager ``PostgresHistoryStore.lock`` returns; ``token`` is this
    acquisition's fencing token, ``lost`` True once the session was found taken over."""

    __slots__ = ("store", "wait_s", "token", "lost", "_conn", "_loan", "_mutex")

    def __init__(self, store: PostgresHistoryStore, wait_s: float) -> None:
        self.store = store
        self.wait_s = wait_s
        self.token = 0
        self.lost = False
        self._conn: Optional[Connection] = None
        self._loan: Optional[Loan[Connection]] = None  # how _conn came, to give it back
        self._mutex = threading.Lock()  # one statement at a time on the connection

    def __enter__(self) -> AdvisoryLock:
        key = self.store._lock_key
        pool = self.store._pool
        for attempt in (1, 2):  # a connection found broken by the first try: once more
            loan = pool.borrow()
            conn = loan.conn
            try:
                got = _try_lock(conn, key)
                break
            except Exception as exc:
                conn.close()
                if attempt == 2 or not loan.reused or not connection_lost(exc, conn):
                    raise
        try:
            if not got:
                poll(lambda: _try_lock(conn, key), self.wait_s, self.store._where())
            self.store._ensure_table(conn)
            sql, sid = self.store._tables.bump, self.store.session_id
            self.token = int(single(conn, lambda cur: fetch(cur, sql, (sid,)))[0][0])
        except BaseException:
            conn.close()  # a connection that may hold the lock must not go back to the pool
            raise
        self._conn, self._loan = conn, loan
        self.store._held = self
        return self

    def run(self, op: Callable[[Any], T], *, retry: bool, transaction: bool,
            fenced: bool = False) -> Optional[Tuple[T]]:
        """``(op(cursor),)`` on the lock's connection; None when the lock is not held here
        (released, or lost and ``op`` is a read): run it on a pooled connection then. A
        ``fenced`` write whose lock cannot be kept raises ``LockLostError``."""
        with self._mutex:
            for attempt in (1, 2, 3):
                conn = self._conn
                if conn is None or self.lost:
                    return None
                if not conn.looks_alive():  # ended while idle: nothing was sent on it
                    self._drop(conn)
                    if not self._retake(fenced):
                        return None
                    continue
                try:
                    self.store._ensure_table(conn)
                    return (in_transaction(conn, op) if transaction else single(conn, op),)
                except Exception as exc:
                    if connection_lost(exc, conn):
                        self._drop(conn)
                        kept = self._retake(fenced)
                        if not (retry or ended_by_server(exc)):
                            raise  # an INSERT that may have been committed: not again
                        if not kept:
                            return None
                        continue
                    roll_back(conn)
                    if attempt == 1 and sqlstate(exc) == UNDEFINED_TABLE:
                        self.store._pool.ready_tables.discard(self.store.table)
                        continue
                    raise
            return None  # the connection kept breaking: the caller's own retries decide

    def _drop(self, conn: Connection) -> None:
        self._conn = self._loan = None
        conn.close()  # the server freed the lock with it (or will)

    def _retake(self, fenced: bool) -> bool:
        """Take the lock again on a new connection, kept only if no one held the session
        since this hold took it (the token is still the newest). Else the hold is lost:
        False, or ``LockLostError`` for a ``fenced`` write."""
        store = self.store
        try:
            loan = store._pool.borrow()
        except Exception:
            if fenced:
                raise
            return False  # the server is unreachable: a read tries the pool, and fails
        conn = loan.conn
        try:
            if _try_lock(conn, store._lock_key):
                sql = f"SELECT {store._tables.fence_ok}"
                rows = single(conn, lambda cur: fetch(cur, sql, (store.session_id, self.token)))
                if rows[0][0]:
                    self._conn, self._loan = conn, loan
                    return True
        except Exception:
            conn.close()
            if fenced:
                raise
            return False
        conn.close()  # frees the lock if it was taken: it is not ours to keep
        self.lost = True
        if fenced:
            raise lock_lost(store._where())
        return False

    def __exit__(self, *exc_info: object) -> None:
        with self._mutex:
            conn, self._conn = self._conn, None
            loan, self._loan = self._loan, None
            if self.store._held is self:
                self.store._held = None
        if conn is None:
            return
        try:
            rows = single(conn, lambda cur: fetch(cur, "SELECT pg_advisory_unlock(%s)",
                                                  (self.store._lock_key,)))
        except Exception:
            conn.close()  # the server frees the lock with the connection
            raise
        if rows[0][0] and loan is not None:
            self.store._pool.give_back(loan)
        else:
            conn.close()
