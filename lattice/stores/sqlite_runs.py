"""The SQLite store's run records and fencing tokens, below its methods (SPEC 17, 18).

Two tables beside the messages:

* ``lattice_history_fences(session_id, token)``: the newest fencing token of each session,
  raised in the transaction that takes the session's lease (``sqlite_lease``). A write made
  under a lease checks, in the same transaction, that no newer token exists: a holder that
  was paused past its lease cannot write after another one took the session.
* ``lattice_runs(session_id, run_id, state, started_at, updated_at, ver, record)``: one row
  per run, ``record`` the JSON text without its call journal; ``ver`` rises with every save
  in the session, so the session's ``version()`` changes when a run record does.
* ``lattice_run_calls(session_id, run_id, call_id, attempt, at)``: the call journal
  (``started_calls``), one row per call, read back into the record. A run's record grows
  by one call a tool turn: kept in the JSON it made every turn's write as long as the run
  so far (#39). A durable turn writes its reply and its call's row in one transaction, and
  the record's row only when something else in it changed (``Written``).

Every function takes an open connection; the caller borrows it and opens transactions.
``Naming`` makes SQLite's errors name the database and session, and a file that is not an
SQLite database (or a damaged one) a ``HistoryStoreError`` (SPEC 21b).
"""

from __future__ import annotations

import copy
from itertools import islice
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..errors import HistoryStoreError
from . import runs

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SCHEMA", "FENCED_APPEND", "NO_FENCE", "bump_fence", "fence_ok",
           "load_run", "list_runs", "Naming", "Written", "Encoded", "save", "call_rows",
           "write_calls"]

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS lattice_history_fences (
    session_id TEXT PRIMARY KEY,
    token INTEGER NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS lattice_runs (
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    state TEXT NOT NULL,
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ver INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, run_id)
)""",
    "CREATE INDEX IF NOT EXISTS lattice_runs_ver ON lattice_runs (session_id, ver)",
    """
CREATE TABLE IF NOT EXISTS lattice_run_calls (
    session_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (session_id, run_id, call_id)
) WITHOUT ROWID""",  # the row in its key's b-tree: a journal write dirties one page, not two
)

_NEWEST = "COALESCE((SELECT token FROM lattice_history_fences WHERE session_id = ?), 0)"

# The append of sqlite.py, inserting nothing when a newer token exists: one statement, so
# the check and the write are one transaction (rowcount 0 = refused).
FENCED_APPEND = f"""
INSERT INTO lattice_history (session_id, seq, message)
SELECT ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM lattice_history WHERE session_id = ?), ?
WHERE {_NEWEST} <= ?"""

# One statement (one transaction), inserting nothing when a newer token exists: the
# check and the write together, as for FENCED_APPEND (rowcount 0 = refused). A write made
# without the lock passes a token no fence exceeds.
_UPSERT = f"""
INSERT INTO lattice_runs (session_id, run_id, state, started_at, updated_at, ver, record)
SELECT ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(ver), 0) + 1 FROM lattice_runs
                       WHERE session_id = ?), ?
WHERE {_NEWEST} <= ?
ON CONFLICT (session_id, run_id) DO UPDATE SET
    state = excluded.state, updated_at = excluded.updated_at, ver = excluded.ver,
    record = excluded.record"""
NO_FENCE = 2 ** 63 - 1


def bump_fence(conn: sqlite3.Connection, session_id: str) -> int:
    """Raise the session's token and return it (inside the lease's transaction)."""
    conn.execute("INSERT OR IGNORE INTO lattice_history_fences VALUES (?, 0)", (session_id,))
    conn.execute("UPDATE lattice_history_fences SET token = token + 1 WHERE session_id = ?",
                 (session_id,))
    row = conn.execute("SELECT token FROM lattice_history_fences WHERE session_id = ?",
                       (session_id,)).fetchone()
    return int(row[0])


def fence_ok(conn: sqlite3.Connection, session_id: str, token: int) -> bool:
    """Whether ``token`` is still the session's newest (inside the write's transaction)."""
    row = conn.execute(f"SELECT {_NEWEST}", (session_id,)).fetchone()
    return int(row[0]) <= token


_CALL = """
INSERT INTO lattice_run_calls (session_id, run_id, call_id, attempt, at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (session_id, run_id, call_id) DO UPDATE SET
    attempt = excluded.attempt, at = excluded.at"""


class Encoded:
    """A stamped record (``runs.stamp``) as ``save`` writes it: the JSON text of all but
    its call journal (``text``; TypeError here, before any I/O, for what JSON cannot
    hold), and the journal (``calls``)."""

    __slots__ = ("record", "text", "calls")

    def __init__(self, record: Dict[str, Any]) -> None:
        calls = record.get("started_calls")
        self.calls: Dict[str, Any] = dict(calls) if isinstance(calls, dict) else {}
        self.record = record
        self.text = runs.encode_record(dict(record, started_calls={}))


_VOLATILE = ("started_calls", "updated_at", "session_id")  # not what makes a row stale


def _rest(record: Dict[str, Any]) -> Dict[str, Any]:
    rest = dict(record)  # (a copy and three pops: a few C calls, not a loop over the keys)
    for key in _VOLATILE:
        rest.pop(key, None)
    return rest


def _snapshot(value: Any) -> Any:
    """A copy of a record's JSON-shaped data that shares nothing mutable with it (what
    ``Written`` compares a later record with), a few times faster than ``deepcopy``.
    Not ``messages.copy_json``: that shares tuples and dict subclasses, which a caller's
    record may hold and change in place."""
    kind = type(value)
    if kind is dict:
        return {k: _snapshot(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(_snapshot(v) for v in value)
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return copy.deepcopy(value)  # (not JSON-shaped: stored as the encoder allows)


class Written:
    """What one store last wrote of each of its runs (the record but its journal, and
    the journal), so a durable tool turn writes only what changed: its call's row, not
    the whole record again (and does not encode it: the record is compared with a deep
    copy of what was written, so a value changed in place is seen too).

    Updated only after the transaction committed; a run another store wrote meanwhile is
    written again in full at worst (rows are upserts), never left stale: only the holder
    of the session's lock writes its runs, and a taken-over holder's writes are refused
    by the fence. (No lock: each access is one dict operation, atomic.)"""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        # run_id -> (the record but its journal, a copy of the journal as written)
        self.runs: Dict[str, Any] = {}

    def calls_only(self, record: Any) -> Optional[Dict[str, Any]]:
        """The journal entries to write when only the journal changed since this store
        wrote ``record``'s run (None: write the whole record)."""
        known = self._known(record)
        if known is None or known[0] != _rest(record):
            return None
        return self.new_calls(record, known)

    def new_calls(self, record: Any, known: Any = None) -> Optional[Dict[str, Any]]:
        """The journal entries of ``record`` this store has not written (None: all, it
        does not know the run): a record written whole writes only those rows too. The
        journal only grows at its end (``RunRecord.with_call``): once every written entry
        is found unchanged (one comparison of item views, in C), the new ones are those
        past them."""
        known = known if known is not None else self._known(record)
        calls = record.get("started_calls") if known is not None else None
        if not isinstance(calls, dict):
            return None
        written = known[1]
        if calls.items() >= written.items():
            new = dict(islice(calls.items(), len(written), None))
            if not new.keys() & written.keys():  # (else a written entry moved: the order)
                return new
        return dict(calls.items() - written.items())  # (an attempt changed, or the order)

    def _known(self, record: Any) -> Any:
        run_id = record.get("run_id") if isinstance(record, dict) else None
        return self.runs.get(run_id) if isinstance(run_id, str) else None

    def done(self, record: Dict[str, Any], whole: bool) -> None:
        """``record`` (as given to the store) was written: whole, or its journal."""
        run_id = record["run_id"]
        if record.get("state") == "ended":  # written again only whole (a replay writes none)
            self.runs.pop(run_id, None)
            return
        known = self.runs.get(run_id)
        rest = _snapshot(_rest(record)) if whole or known is None else known[0]
        calls = record.get("started_calls")
        self.runs[run_id] = (rest, dict(calls) if isinstance(calls, dict) else {})

    def forget(self, run_id: Any) -> None:
        self.runs.pop(run_id, None)


def save(conn: sqlite3.Connection, record: Dict[str, Any], encoded: Optional[Encoded],
         token: int, calls: Dict[str, Any]) -> bool:
    """Inside a transaction: the record's row (if ``encoded``; fenced: False if a token
    newer than ``token`` exists) and the rows of ``calls``."""
    sid, rid = record["session_id"], record["run_id"]
    if encoded is not None:
        cursor = conn.execute(_UPSERT, (sid, rid, str(record.get("state")),
                                        float(record["started_at"]),
                                        float(record["updated_at"]), sid, encoded.text,
                                        sid, token))
        if cursor.rowcount != 1:
            return False
    write_calls(conn, call_rows(sid, rid, calls, float(record["updated_at"])))
    return True


def call_rows(session_id: str, run_id: str, calls: Dict[str, Any], at: float) -> List[Any]:
    """The journal rows of ``calls`` (a bad attempt fails here: before any I/O if made
    before the transaction)."""
    return [(session_id, run_id, str(call_id), int(attempt), at)
            for call_id, attempt in calls.items()]


def write_calls(conn: sqlite3.Connection, rows: List[Any]) -> None:
    """Inside a transaction: insert or update the journal ``rows`` (``call_rows``)."""
    if len(rows) == 1:  # a durable tool turn's one call
        conn.execute(_CALL, rows[0])
    elif rows:
        conn.executemany(_CALL, rows)


def _with_calls(conn: sqlite3.Connection, found: List[Dict[str, Any]],
                session_id: Optional[str], run_id: Optional[str] = None) -> None:
    """Put each record's journal rows back into its ``started_calls`` (a record stored by
    an older version keeps the ones in its JSON), and its ``updated_at`` at the latest."""
    if not found:
        return
    sql = "SELECT session_id, run_id, call_id, attempt, at FROM lattice_run_calls"
    where, params = [], []
    if session_id is not None:
        where.append("session_id = ?")
        params.append(session_id)
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if where:
        sql += " WHERE " + " AND ".join(where)
    by_run: Dict[Any, List[Any]] = {}
    # In the order the calls started (a table without rowid keeps its rows by key; the
    # order of a record's journal is only shown, never relied on: ``Written`` checks it).
    for sid, rid, call_id, attempt, at in conn.execute(sql + " ORDER BY at, call_id", params):
        by_run.setdefault((sid, rid), []).append((call_id, attempt, at))
    for record in found:
        rows = by_run.get((record.get("session_id"), record.get("run_id")))
        if not rows:
            continue
        started = record.get("started_calls")
        started = dict(started) if isinstance(started, dict) else {}
        latest = record.get("updated_at")
        for call_id, attempt, at in rows:
            started[call_id] = attempt
            if isinstance(latest, (int, float)) and at > latest:
                latest = at
        record["started_calls"] = started
        record["updated_at"] = latest


def load_run(conn: sqlite3.Connection, session_id: str, run_id: str) -> Optional[Dict[str, Any]]:
    row = conn.execute("SELECT record FROM lattice_runs WHERE session_id = ? AND run_id = ?",
                       (session_id, run_id)).fetchone()
    record = None if row is None else runs.decode_record(row[0], run_id)
    if record is not None:
        _with_calls(conn, [record], session_id, run_id)
    return record


def list_runs(conn: sqlite3.Connection, session_id: Optional[str],
              state: Optional[str]) -> List[Dict[str, Any]]:
    """Records of ``session_id`` (every session's when None) of ``state`` (any when None)."""
    where, params = [], []
    if session_id is not None:
        where.append("session_id = ?")
        params.append(session_id)
    if state is not None:
        where.append("state = ?")
        params.append(state)
    sql = "SELECT record FROM lattice_runs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.execute(sql + " ORDER BY started_at, run_id", params).fetchall()
    found = [r for r in (runs.decode_record(text) for (text,) in rows) if r is not None]
    _with_calls(conn, found, session_id)
    return found


class Naming:
    """Re-raise a ``sqlite3.Error`` with the database and session in its message (SQLite's
    own messages, e.g. "unable to open database file", name neither); the original is
    chained. A corrupt file or one that is not SQLite becomes ``HistoryStoreError``: no
    retry or wait mends it. ``OSError`` gets the file name if it has none."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            return
        import sqlite3

        if isinstance(exc, sqlite3.DatabaseError) and _corrupt(exc):
            raise HistoryStoreError(f"{self.where} is damaged or not an SQLite database: "
                                    f"{exc}") from exc
        if isinstance(exc, sqlite3.Error) and self.where not in str(exc):
            named = type(exc)(f"{exc} ({self.where})")
            for attr in ("sqlite_errorcode", "sqlite_errorname"):
                if hasattr(exc, attr):
                    setattr(named, attr, getattr(exc, attr))
            raise named from exc


_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes)
_CORRUPT_TEXT = ("file is not a database", "database disk image is malformed")


def _corrupt(exc: Exception) -> bool:
    """Whether ``exc`` says the database file is damaged or not SQLite at all
    (``sqlite_errorcode`` exists from Python 3.11; the message before it)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _CORRUPT_CODES
    return any(text in str(exc) for text in _CORRUPT_TEXT)
