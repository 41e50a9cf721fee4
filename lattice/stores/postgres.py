"""PostgreSQL history store: many sessions in one table, many processes on many hosts.

One table (``lattice_messages`` unless told otherwise), created if missing::

    id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, message TEXT NOT NULL
    + an index on (session_id, id)

``append`` is one ``INSERT``; ``replace`` deletes and inserts in one transaction; ``load``
reads a session in ``id`` order. The message is JSON text (not ``jsonb``, which would
reorder keys). Ids come from one sequence and are never reused, so the largest id of a
session is its version: every append and every non-empty replace makes a larger one.

The session lock is a session-level advisory lock (``pg_try_advisory_lock``) taken on a
connection held for the whole query: the server frees it when that connection ends, so a
killed holder frees its session as soon as the server notices the closed socket. While it
is held, the store runs every statement on that connection: a statement still running in
the server when its client dies ends before the backend notices, so the session is not
free until a killed holder's last write has committed. Each acquisition gets a fencing
token, and writes made while held carry it (``pg_lock.py``): a holder whose connection died
and whose session was taken by someone else meanwhile cannot write (``LockLostError``).

Run records (SPEC 17) live in ``<table>_runs``, fencing tokens in ``<table>_fences``.
``pg_sql.py`` holds the statements below the methods (the tables' DDL, running one
statement or one transaction), ``pg_lock.py`` the lock, ``pg_driver.py`` the connections.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from . import runs
from .base import Message, check_flag, encode_message
from .locks import check_wait
from .pg_conninfo import parse_conninfo, redacted
from .pg_driver import (
    DRIVERS,
    Connection,
    Pool,
    connection_lost,
    ended_by_server,
    shared_pool,
    sqlstate,
)
from .pg_lock import AdvisoryLock
from .pg_sql import UNDEFINED_TABLE, Tables, fetch, in_transaction, lock_key, single
from .shape import keep_messages

__all__ = ["PostgresHistoryStore"]

T = TypeVar("T")

_PART = r"[A-Za-z_][A-Za-z0-9_]{0,62}"
_TABLE = re.compile(rf"^(?:{_PART}\.)?{_PART}$")
_CHUNK = 500  # rows per INSERT in replace


class PostgresHistoryStore:
    """The history of session ``session_id`` in a PostgreSQL table.

    Creating the store does no I/O and imports no driver. Safe to share between threads;
    any number of processes and hosts may use the same table.

    Args:
        conninfo: a libpq connection string, ``key=value`` pairs or a ``postgresql://``
            URI (``host`` may be a socket directory). Ignored when ``connect`` is given.
        session_id: a non-empty string naming the conversation.
        table: the table name (``name`` or ``schema.name``), created if missing.
        fail_on_error: make store failures raise ``HistoryStoreError`` from the Agent.
        connect: a callable returning a DB-API connection (``format`` paramstyle, as
            psycopg, psycopg2 and pg8000 have), used instead of ``conninfo``.
        driver: ``"psycopg"`` or ``"pg8000"`` to choose; default: psycopg if installed,
            else pg8000.

    Stores with the same ``conninfo`` (and driver) in one process share a pool of idle
    connections (8 kept at most); stores with a ``connect`` callable share one through
    ``with_session``. A connection the server closed is replaced before it is used; a
    statement that fails because its connection broke is retried once on a new
    connection, except an ``append`` whose ``INSERT`` may have been committed (a socket
    that broke mid-statement, as opposed to the server ending the connection).
    """

    def __init__(
        self,
        conninfo: Optional[str],
        session_id: str,
        *,
        table: str = "lattice_messages",
        fail_on_error: bool = False,
        connect: Optional[Callable[[], Any]] = None,
        driver: Optional[str] = None,
    ) -> None:
        _check_session(session_id)
        check_flag("fail_on_error", fail_on_error)
        if not isinstance(table, str) or not _TABLE.match(table):
            raise ValueError(f"table must be a SQL name like 'name' or 'schema.name' "
                             f"(letters, digits, _), got {table!r}")
        if connect is not None and not callable(connect):
            raise ValueError(f"connect must be a callable returning a DB-API connection, "
                             f"got {connect!r}")
        if driver is not None and driver not in DRIVERS:
            raise ValueError(f"driver must be one of {DRIVERS} or None, got {driver!r}")
        self.session_id = session_id
        self.table = table
        self.fail_on_error = fail_on_error
        if connect is not None:
            self._shown = f"connect={getattr(connect, '__name__', type(connect).__name__)}"
            self._pool = Pool(connect)
        else:
            if not isinstance(conninfo, str):
                raise ValueError(f"conninfo must be a libpq connection string, "
                                 f"got {type(conninfo).__name__}")
            params = parse_conninfo(conninfo)
            self._shown = repr(redacted(params))
            self._pool = shared_pool(conninfo, params, driver)
        self._sql = Tables(table)
        self._lock_key = lock_key(table, session_id)
        self._held: Optional[AdvisoryLock] = None  # while locked: run statements there

    def __repr__(self) -> str:
        return f"PostgresHistoryStore({self._shown}, {self.session_id!r}, table={self.table!r})"

    def with_session(self, session_id: str) -> PostgresHistoryStore:
        """A store for another session of the same table, sharing this one's connections."""
        other = copy.copy(self)  # same table, pool, policy
        other.session_id = _check_session(session_id)
        other._lock_key = lock_key(self.table, session_id)
        other._held = None
        return other

    # -- the protocol ---------------------------------------------------------------

    def load(self) -> List[Message]:
        """The session's messages in order (rows that are not JSON, or not history
        messages, are skipped and counted in a warning)."""
        rows = self._run(lambda cur: fetch(cur, f"SELECT message FROM {self.table} "
                                                "WHERE session_id = %s ORDER BY id",
                                           (self.session_id,)), retry=True, own_cursor=True)
        values = _parse_rows(rows)
        return keep_messages(values, self._where(), unit="row",
                             unreadable=len(rows) - len(values))

    def append(self, message: Message) -> None:
        """Add one message at the end of the session (one ``INSERT``; while locked, one that
        checks the fencing token)."""
        text = encode_message(message).decode("utf-8")  # before any I/O
        sid = self.session_id
        hold = self._fence()
        if hold is None:
            sql = f"INSERT INTO {self.table} (session_id, message) VALUES (%s, %s)"
            self._run(lambda cur: cur.execute(sql, (sid, text)), retry=False)
            return
        fenced, token = self._tables.fenced_append, hold.token
        added = self._run(lambda cur: _rowcount(cur, fenced, (sid, text, sid, token)),
                          retry=False, fenced=True)
        self._refused_unless(added, hold)

    def replace(self, messages: List[Message]) -> None:
        """Make the session hold exactly ``messages``, in one transaction."""
        texts = [encode_message(m).decode("utf-8") for m in messages]
        hold = self._fence()

        def rewrite(cur: Any) -> None:
            if hold is not None:
                sql = f"SELECT {self._tables.fence_ok}"
                if not fetch(cur, sql, (self.session_id, hold.token))[0][0]:
                    hold.lost = True
                    raise runs.lock_lost(self._where())
            cur.execute(f"DELETE FROM {self.table} WHERE session_id = %s", (self.session_id,))
            for start in range(0, len(texts), _CHUNK):
                chunk = texts[start:start + _CHUNK]
                cur.execute(
                    f"INSERT INTO {self.table} (session_id, message) VALUES "
                    + ", ".join(["(%s, %s)"] * len(chunk)),
                    [value for text in chunk for value in (self.session_id, text)],
                )

        self._run(rewrite, retry=True, transaction=True, fenced=hold is not None)

    # -- run records (SPEC 17) ----------------------------------------------------------

    def load_run(self, run_id: str) -> Optional[Dict[str, Any]]:
        """The record of run ``run_id`` in this session, or None."""
        sql = f"SELECT record FROM {self._tables.runs} WHERE session_id = %s AND run_id = %s"
        rows = self._run(lambda cur: fetch(cur, sql, (self.session_id, run_id)), retry=True)
        return runs.decode_record(rows[0][0], run_id) if rows else None

    def save_run(self, record: Dict[str, Any]) -> None:
        """Insert or update the record of ``record["run_id"]`` (one statement, fenced like
        ``append`` while locked)."""
        stored = runs.stamp(record, self.session_id)
        text = runs.encode_record(stored)  # before any I/O
        hold = self._fence()
        sid = self.session_id
        params = (sid, *_record_columns(stored), self.table, text, sid,
                  _NO_FENCE if hold is None else hold.token)
        sql = self._tables.upsert
        saved = self._run(lambda cur: _rowcount(cur, sql, params), retry=True,
                          fenced=hold is not None)
        self._refused_unless(saved, hold)

    def append_and_save_run(self, message: Message, record: Dict[str, Any]) -> None:
        """``append(message)`` and ``save_run(record)`` as one statement: both or neither,
        in one round trip (a durable run's reply and the journal entry of the call it
        starts at once). Fenced like ``append`` while locked."""
        text = encode_message(message).decode("utf-8")  # before any I/O
        stored = runs.stamp(record, self.session_id)
        record_text = runs.encode_record(stored)
        hold = self._fence()
        sid = self.session_id
        params = (sid, text, sid, _NO_FENCE if hold is None else hold.token,
                  sid, *_record_columns(stored), record_text)
        sql = self._tables.append_and_upsert
        added = self._run(lambda cur: _rowcount(cur, sql, params), retry=False,
                          fenced=hold is not None)
        self._refused_unless(added, hold)

    def list_runs(self, state: Optional[str] = None, *,
                  all_sessions: bool = False) -> List[Dict[str, Any]]:
        """The run records of this session (of every session of the table with
        ``all_sessions``), of ``state`` if given, oldest first."""
        runs.check_state(state)
        where, params = ["TRUE"], []
        if not all_sessions:
            where.append("session_id = %s")
            params.append(self.session_id)
        if state is not None:
            where.append("state = %s")
            params.append(state)
        sql = (f"SELECT record FROM {self._tables.runs} WHERE {' AND '.join(where)} "
               "ORDER BY started_at, run_id")
        rows = self._run(lambda cur: fetch(cur, sql, params), retry=True)
        found = [runs.decode_record(text) for (text,) in rows]
        return [r for r in found if r is not None]

    # -- the optional capabilities ------------------------------------------------------

    def lock(self, *, wait_s: float = 0.0) -> AdvisoryLock:
        """Hold this session for one query, across processes and hosts (an advisory lock
        on a connection kept for the query). Entering raises ``ConcurrentQueryError`` if
        another holder keeps it past ``wait_s`` seconds. Each acquisition gets a fencing
        token; while held, this store's writes are refused (``LockLostError``) once another
        holder has taken the session over."""
        return AdvisoryLock(self, check_wait(wait_s))

    def version(self) -> Optional[int]:
        """The largest of the session's message ids and run-record versions (None when it
        holds neither): two indexed reads in one statement."""
        sql, sid = self._tables.version, self.session_id
        rows = self._run(lambda cur: fetch(cur, sql, (sid, sid)), retry=True)
        return None if rows[0][0] is None else int(rows[0][0])

    # -- sessions -------------------------------------------------------------------

    def list_sessions(self) -> List[str]:
        """Every session id with at least one message, sorted."""
        rows = self._run(lambda cur: fetch(
            cur, f"SELECT DISTINCT session_id FROM {self.table} ORDER BY session_id", ()),
            retry=True)
        return [str(sid) for (sid,) in rows]

    def delete(self, session_id: Optional[str] = None) -> None:
        """Remove every message of ``session_id`` (default: this store's session)."""
        target = self.session_id if session_id is None else session_id
        self._run(lambda cur: cur.execute(f"DELETE FROM {self.table} WHERE session_id = %s",
                                          (target,)), retry=True)

    def close(self) -> None:
        """Close the idle pooled connections (new ones are opened if a store of the pool is
        used again)."""
        self._pool.close()

    def __enter__(self) -> PostgresHistoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------

    def _where(self) -> str:
        return f"session {self.session_id!r} of table {self.table} ({self._shown})"

    @property
    def _tables(self) -> Tables:
        """The statements for ``self.table`` (made again if someone assigned another)."""
        if self._sql.messages != self.table:
            self._sql = Tables(self.table)
        return self._sql

    def _fence(self) -> Optional[AdvisoryLock]:
        """The lock this store holds (None: an unfenced write); ``LockLostError`` at once
        when it is already known lost."""
        hold = self._held
        if hold is not None and hold.lost:
            raise runs.lock_lost(self._where())
        return hold

    def _refused_unless(self, rowcount: int, hold: Optional[AdvisoryLock]) -> None:
        if rowcount != 1 and hold is not None:  # the fence said no: a newer token exists
            hold.lost = True
            raise runs.lock_lost(self._where())

    def _run(self, op: Callable[[Any], T], *, retry: bool, transaction: bool = False,
             own_cursor: bool = False, fenced: bool = False) -> T:
        """``op(cursor)`` on a pooled connection, the table created first if needed.

        A connection error on a reused connection is retried once on a new one when
        ``retry`` (the operation is idempotent), or when the server ended the connection
        without running the statement (``ended_by_server``); a missing table (dropped
        behind our back) is created and the operation tried again, since nothing was
        written.
        """
        held = self._held
        if held is not None:
            done = held.run(op, retry=retry, transaction=transaction, fenced=fenced)
            if done is not None:
                return done[0]
        attempts = 2
        while True:
            attempts -= 1
            loan = self._pool.borrow()
            conn = loan.conn
            try:
                self._ensure_table(conn)
                if transaction:
                    result = in_transaction(conn, op)
                else:
                    result = single(conn, op, own_cursor=own_cursor)
            except Exception as exc:
                conn.close()
                if attempts > 0 and sqlstate(exc) == UNDEFINED_TABLE:
                    self._pool.ready_tables.discard(self.table)
                    continue
                if attempts > 0 and loan.reused and (
                    ended_by_server(exc) or (retry and connection_lost(exc, conn))
                ):
                    continue
                raise
            self._pool.give_back(loan)
            return result

    def _ensure_table(self, conn: Connection) -> None:
        if self.table in self._pool.ready_tables:
            return

        # The fences table is made with the runs table: with both of these, all exist.
        tables = self._tables
        exists = single(conn, lambda cur: fetch(cur, "SELECT to_regclass(%s), to_regclass(%s)",
                                                (tables.messages, tables.runs)))
        if None in exists[0]:
            in_transaction(conn, tables.create)
        self._pool.ready_tables.add(self.table)


def _check_session(session_id: Any) -> str:
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
    return session_id


_NO_FENCE = 2 ** 63 - 1  # the token of a write made without the lock: no fence refuses it


def _record_columns(stored: Dict[str, Any]) -> Tuple[str, str, float, float]:
    """The run-record table's own columns of a stamped record, in statement order."""
    return (stored["run_id"], str(stored.get("state")), float(stored["started_at"]),
            float(stored["updated_at"]))


def _rowcount(cur: Any, sql: str, params: Any) -> int:
    cur.execute(sql, params)
    return int(cur.rowcount)


def _parse_rows(rows: List[Any]) -> List[Any]:
    """The JSON values of ``(text,)`` rows, leaving out what does not parse."""
    loads = json.loads
    try:
        return [loads(text) for (text,) in rows]  # the usual case, at full speed
    except (TypeError, ValueError):
        pass
    values: List[Any] = []
    for (text,) in rows:
        try:
            values.append(loads(text))
        except (TypeError, ValueError):
            pass
    return values
