"""SQLite history store: many sessions in one file, used from many threads and processes.

One table, ``lattice_history(session_id, seq, message)`` keyed by ``(session_id, seq)``,
``message`` holding the JSON text; beside it ``lattice_history_versions`` counts each
session's rewrites (for ``version()``) and ``lattice_history_leases`` holds session locks
(``sqlite_lease.py``), ``lattice_history_fences`` their fencing tokens and ``lattice_runs``
the run records (``sqlite_runs.py``). The database runs in WAL mode, so readers never wait
for the writer, and every connection waits up to 30 s for a lock instead of failing.

Connections are borrowed from a small pool for one operation and given back. A
thread-per-request server thus reuses a handful of connections rather than opening one per
thread, and the stores made by ``with_session`` share one pool. ``sqlite3`` is imported on
first use, so ``import lattice`` does not pay for it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import runs, sqlite_runs
from .base import Message, PathArg, check_flag, encode_message, resolve_path
from .idle import IdlePool
from .locks import check_wait
from .shape import keep_messages
from .sqlite_lease import LEASE_SCHEMA, SqliteLease, transaction

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SqliteHistoryStore"]

_BUSY_TIMEOUT_S = 30.0

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS lattice_history (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
)""",
    # How many times each session was replaced or deleted: with MAX(seq), which every
    # append raises, it makes the session's version (see SqliteHistoryStore.version).
    """
CREATE TABLE IF NOT EXISTS lattice_history_versions (
    session_id TEXT PRIMARY KEY,
    rewrites INTEGER NOT NULL
)""",
    LEASE_SCHEMA,
    *sqlite_runs.SCHEMA,
)

_BUMP = (
    "INSERT OR IGNORE INTO lattice_history_versions (session_id, rewrites) VALUES (?, 0)",
    "UPDATE lattice_history_versions SET rewrites = rewrites + 1 WHERE session_id = ?",
)

_VERSION = """
SELECT (SELECT MAX(seq) FROM lattice_history WHERE session_id = ?),
       (SELECT rewrites FROM lattice_history_versions WHERE session_id = ?),
       (SELECT MAX(ver) FROM lattice_runs WHERE session_id = ?)"""

# One statement, so it runs as one write transaction: the write lock is taken before
# MAX(seq) is read, and two appenders can never pick the same seq.
_APPEND = """
INSERT INTO lattice_history (session_id, seq, message)
SELECT ?, COALESCE(MAX(seq), 0) + 1, ? FROM lattice_history WHERE session_id = ?"""


class _Pool(IdlePool["sqlite3.Connection"]):
    """Idle connections to one database file (a connection still in a transaction, say
    after an error, is closed rather than kept)."""

    def __init__(self, path: str, fsync: bool) -> None:
        # (no bound method given: the pool must not refer to itself, so that a store
        # dropped unclosed has its connections closed at once, not at the next GC run)
        super().__init__(functools.partial(_connect, path, fsync),
                         reusable=lambda conn: not conn.in_transaction)
        self.path = path
        self.fsync = fsync


def _connect(path: str, fsync: bool) -> sqlite3.Connection:
    import sqlite3

    os.makedirs(os.path.dirname(path), exist_ok=True)
    # isolation_level=None: no implicit transactions; replace opens its own.
    # check_same_thread=False: a pooled connection serves whichever thread borrows it
    # (one at a time).
    conn = sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
        _set_up(conn, fsync)
    except BaseException:
        conn.close()
        raise
    return conn


def _set_up(conn: sqlite3.Connection, fsync: bool) -> None:
    """WAL mode, the synchronous level and the table, waiting out other connections.

    The busy timeout does not cover all of it: while another connection turns a new
    (still rollback-journal) file into WAL, or writes to it, ``PRAGMA journal_mode = WAL``
    fails with "database is locked" at once, without waiting. Many threads or processes
    opening a new file together hit that, so a busy error is retried here, up to the
    same 30 s any other statement waits.
    """
    import sqlite3

    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    pause = 0.001
    while True:
        try:
            # Once the file is in WAL mode (the usual case) setting it again is not needed.
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            # In WAL mode NORMAL survives a crash of the process; FULL also a power cut.
            conn.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
            for statement in _SCHEMA:
                conn.execute(statement)
            for statement in sqlite_runs.REPLY_WITH_CALL:  # (this connection's own)
                conn.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _is_busy(exc: Exception) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (by code where Python reports it, else by message)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SqliteHistoryStore:
    """The history of session ``session_id`` in the SQLite database at ``path``.

    Creating the store touches nothing; the folder, file and table are created on first
    use, and ``load`` of a missing file returns ``[]``. Safe to share between threads;
    any number of processes may use the same file.

    Args:
        path: the database file (``str`` or path-like; ``~`` is expanded).
        session_id: a non-empty string naming the conversation.
        fail_on_error: make store failures raise ``HistoryStoreError`` from the Agent.
        fsync: ``synchronous=FULL``, so a committed message survives a power cut
            (default ``NORMAL``: it survives a crash of the process).
    """

    def __init__(
        self,
        path: PathArg,
        session_id: str,
        *,
        fail_on_error: bool = False,
        fsync: bool = False,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
        self.path = resolve_path(path)
        self.session_id = session_id
        self.fail_on_error = check_flag("fail_on_error", fail_on_error)
        self._pool = _Pool(self.path, check_flag("fsync", fsync))
        self._hold: Optional[SqliteLease] = None  # while locked: writes carry its token

    def __repr__(self) -> str:
        return f"SqliteHistoryStore({self.path!r}, {self.session_id!r})"

    def with_session(self, session_id: str) -> SqliteHistoryStore:
        """A store for another session of the same file, sharing this one's connections."""
        other = SqliteHistoryStore(
            self.path, session_id, fail_on_error=self.fail_on_error, fsync=self._pool.fsync
        )
        other._pool = self._pool
        return other

    # -- the protocol ---------------------------------------------------------------

    def load(self) -> List[Message]:
        """The session's messages in order (rows that are not JSON, or not history
        messages, are skipped and counted in a warning)."""
        if not os.path.exists(self.path):
            return []  # loading must not create anything
        with self._naming(), self._pool.borrow() as conn:
            rows = conn.execute(
                "SELECT message FROM lattice_history WHERE session_id = ? ORDER BY seq",
                (self.session_id,),
            ).fetchall()
        values: List[Any] = []
        for (text,) in rows:
            try:
                values.append(json.loads(text))
            except (TypeError, ValueError):
                pass
        return keep_messages(values, self._where(), unit="row",
                             unreadable=len(rows) - len(values))

    def append(self, message: Message) -> None:
        """Add one message at the end of the session (refused with ``LockLostError`` while
        this store holds a lease another holder has since taken over)."""
        text = encode_message(message).decode("utf-8")  # before any I/O
        hold = self._fence()
        with self._naming(), self._pool.borrow() as conn:
            self._append(conn, text, hold)

    def replace(self, messages: List[Message]) -> None:
        """Make the session hold exactly ``messages``, in one transaction."""
        rows = [
            (self.session_id, seq, encode_message(m).decode("utf-8"))
            for seq, m in enumerate(messages, 1)
        ]
        hold = self._fence()
        with self._naming(), self._pool.borrow() as conn, transaction(conn):
            self._check_fence(conn, hold)
            _delete(conn, self.session_id)
            conn.executemany(
                "INSERT INTO lattice_history (session_id, seq, message) VALUES (?, ?, ?)", rows
            )

    # -- run records (SPEC 17) ----------------------------------------------------------

    def load_run(self, run_id: str) -> Optional[Dict[str, Any]]:
        """The record of run ``run_id`` in this session, or None."""
        if not os.path.exists(self.path):
            return None
        with self._naming(), self._pool.borrow() as conn:
            return sqlite_runs.load_run(conn, self.session_id, run_id)

    def save_run(self, record: Dict[str, Any]) -> None:
        """Insert or update the record of ``record["run_id"]`` (fenced like ``append``).
        Its journal goes to rows of its own: only those that differ from the stored ones
        are written."""
        encoded = sqlite_runs.Encoded(runs.stamp(record, self.session_id))  # before any I/O
        hold = self._fence()
        token = sqlite_runs.NO_FENCE if hold is None else hold.token
        with self._naming(), self._pool.borrow() as conn:
            # Usually every journal row is written already (as each call started): then
            # the record's row alone, one statement. (Read before the write: only the
            # holder of the session's lock writes its journal.)
            rows = sqlite_runs.unwritten(conn, encoded)
            with transaction(conn) if rows else contextlib.nullcontext():
                saved = sqlite_runs.save(conn, encoded, token, rows)
        self._refused_unless(saved, hold)

    def append_and_save_run(self, message: Message, record: Dict[str, Any]) -> None:
        """``append(message)`` and ``save_run(record)`` in one transaction: both or
        neither, one commit (a durable run's prompt and its new record). Fenced like
        ``append``."""
        text = encode_message(message).decode("utf-8")  # before any I/O
        encoded = sqlite_runs.Encoded(runs.stamp(record, self.session_id))
        hold = self._fence()
        with self._naming(), self._pool.borrow() as conn, transaction(conn):
            self._append(conn, text, hold)
            sqlite_runs.save(conn, encoded, sqlite_runs.NO_FENCE,  # (fenced by the append)
                             sqlite_runs.unwritten(conn, encoded))

    def save_calls(self, run_id: str, calls: Dict[str, int]) -> None:
        """Journal entries of run ``run_id``, whose record this store holds: ``calls``
        maps a tool call's id to its attempt (``load_run`` gives them back in the record's
        ``started_calls``). Fenced like ``append``."""
        rows = sqlite_runs.call_rows(self.session_id, run_id, calls, time.time())
        hold = self._fence()
        with self._naming(), self._pool.borrow() as conn:
            with transaction(conn) if len(rows) > 1 else contextlib.nullcontext():
                saved = sqlite_runs.write_calls(conn, rows, None if hold is None else hold.token)
        self._refused_unless(saved, hold)

    def append_and_save_calls(self, message: Message, run_id: str,
                              calls: Dict[str, int]) -> None:
        """``append(message)`` and ``save_calls(run_id, calls)`` at once: both or neither,
        one commit (a durable tool turn: its reply and the journal entry of the call it
        starts; one statement for one entry, #39)."""
        text = encode_message(message).decode("utf-8")  # before any I/O
        rows = sqlite_runs.call_rows(self.session_id, run_id, calls, time.time())
        hold = self._fence()
        token = sqlite_runs.NO_FENCE if hold is None else hold.token
        with self._naming(), self._pool.borrow() as conn:
            if not rows:
                self._append(conn, text, hold)
                return
            (sid, rid, call_id, attempt, at), rest = rows[0], rows[1:]
            with transaction(conn) if rest else contextlib.nullcontext():
                try:
                    conn.execute(sqlite_runs.REPLY_AND_CALL,
                                 (sid, text, rid, call_id, attempt, at, token))
                except Exception as exc:  # (the trigger's RAISE: an IntegrityError)
                    self._refused_unless(sqlite_runs.FENCED_OUT not in str(exc), hold)
                    raise
                sqlite_runs.write_calls(conn, rest)  # (fenced by the first)

    def list_runs(self, state: Optional[str] = None, *,
                  all_sessions: bool = False) -> List[Dict[str, Any]]:
        """The run records of this session (of every session with ``all_sessions``), of
        ``state`` if given, oldest first."""
        runs.check_state(state)
        if not os.path.exists(self.path):
            return []
        with self._naming(), self._pool.borrow() as conn:
            return sqlite_runs.list_runs(conn, None if all_sessions else self.session_id,
                                         state)

    # -- the optional capabilities ------------------------------------------------------

    def lock(self, *, wait_s: float = 0.0) -> SqliteLease:
        """Hold this session for one query, across threads and processes: a lease row
        renewed every second while held, free 5 s after a holder dies (at once for a holder
        of this host known to be dead). Entering raises
        ``ConcurrentQueryError`` if another holder keeps it past ``wait_s`` seconds. Each
        acquisition gets a fencing token; while held, this store's writes are refused
        (``LockLostError``) once another holder has taken the session over."""
        return SqliteLease(self, check_wait(wait_s))

    def version(self) -> Optional[Tuple[int, int, int]]:
        """``(rewrites, last seq, run writes)`` of the session: every append raises the last
        seq, every replace or delete the rewrite count, every saved run record the third.
        None while the session has never been written.
        """
        if not os.path.exists(self.path):
            return None
        sid = self.session_id
        with self._naming(), self._pool.borrow() as conn:
            last, rewrites, run_ver = conn.execute(_VERSION, (sid, sid, sid)).fetchone()
        if last is None and rewrites is None and run_ver is None:
            return None
        return (rewrites or 0, last or 0, run_ver or 0)

    # -- sessions -------------------------------------------------------------------

    def list_sessions(self) -> List[str]:
        """Every session id with at least one message, sorted."""
        if not os.path.exists(self.path):
            return []
        with self._pool.borrow() as conn:
            rows = conn.execute(
                "SELECT DISTINCT session_id FROM lattice_history ORDER BY session_id"
            ).fetchall()
        return [sid for (sid,) in rows]

    def delete(self, session_id: Optional[str] = None) -> None:
        """Remove every message of ``session_id`` (default: this store's session)."""
        if not os.path.exists(self.path):
            return
        target = self.session_id if session_id is None else session_id
        with self._naming(), self._pool.borrow() as conn, transaction(conn):
            _delete(conn, target)

    def close(self) -> None:
        """Close the pooled connections (new ones are opened if the store is used again)."""
        self._pool.close()

    def __enter__(self) -> SqliteHistoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _where(self) -> str:
        return f"session {self.session_id!r} of database {self.path}"

    def _fence(self) -> Optional[SqliteLease]:
        """The lease this store holds (None: an unfenced write), refusing at once when a
        renewal already found it taken."""
        hold = self._hold
        if hold is not None and hold.lost:
            raise runs.lock_lost(self._where())
        return hold

    def _append(self, conn: sqlite3.Connection, text: str,
                hold: Optional[SqliteLease]) -> None:
        """Append the encoded message ``text``: one statement (the write lock is taken
        before MAX(seq) is read), refused if ``hold``'s token is no longer the newest."""
        sid = self.session_id
        if hold is None:
            conn.execute(_APPEND, (sid, text, sid))
        elif conn.execute(sqlite_runs.FENCED_APPEND,
                          (sid, sid, text, sid, hold.token)).rowcount != 1:
            self._refused_unless(False, hold)

    def _refused_unless(self, saved: bool, hold: Optional[SqliteLease]) -> None:
        """``LockLostError`` for a fenced write the store refused (``hold`` is then lost)."""
        if not saved and hold is not None:
            hold.lost = True
            raise runs.lock_lost(self._where())

    def _check_fence(self, conn: sqlite3.Connection, hold: Optional[SqliteLease]) -> None:
        """Inside a write transaction: refuse it if a newer token exists."""
        if hold is not None:
            self._refused_unless(sqlite_runs.fence_ok(conn, self.session_id, hold.token), hold)

    def _naming(self) -> sqlite_runs.Naming:
        return sqlite_runs.Naming(self._where())


def _delete(conn: sqlite3.Connection, session_id: str) -> None:
    """Remove a session's messages and count the rewrite (inside a transaction)."""
    conn.execute("DELETE FROM lattice_history WHERE session_id = ?", (session_id,))
    for statement in _BUMP:
        conn.execute(statement, (session_id,))
