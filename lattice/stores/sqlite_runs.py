"""The SQLite store's run records and fencing tokens, below its methods (SPEC 17, 18).

Three tables beside the messages:

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
  so far (#39). A durable tool turn writes its reply and its call's row in one statement
  (``append_and_save_calls``: the journal says what changed, the record's row is left as
  it is), an insert into a TEMP view whose trigger writes both (``REPLY_WITH_CALL``, made
  on each connection); a record saved whole writes its row and only the journal rows that
  differ from the stored ones (``unwritten``).

Every function takes an open connection; the caller borrows it and opens transactions.
``Naming`` makes SQLite's errors name the database and session, and a file that is not an
SQLite database (or a damaged one) a ``HistoryStoreError`` (SPEC 21b).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from ..errors import HistoryStoreError
from . import runs

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SCHEMA", "FENCED_APPEND", "NO_FENCE", "REPLY_WITH_CALL", "REPLY_AND_CALL",
           "FENCED_OUT", "bump_fence", "fence_ok",
           "load_run", "list_runs", "Naming", "Encoded", "attempts", "unwritten", "save",
           "call_rows",
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


_UPSERT_CALL = """
ON CONFLICT (session_id, run_id, call_id) DO UPDATE SET
    attempt = excluded.attempt, at = excluded.at"""
# A journal row, fenced like FENCED_APPEND (rowcount 0 = refused); unfenced, inside a
# transaction a fenced write already checked.
_FENCED_CALL = f"""
INSERT INTO lattice_run_calls (session_id, run_id, call_id, attempt, at)
SELECT ?1, ?2, ?3, ?4, ?5 WHERE {_NEWEST.replace("?", "?1")} <= ?6""" + _UPSERT_CALL
_CALL = """
INSERT INTO lattice_run_calls (session_id, run_id, call_id, attempt, at)
VALUES (?, ?, ?, ?, ?)""" + _UPSERT_CALL
# A durable tool turn's reply and its call's journal row in one statement (so one implicit
# transaction: both or neither, and a quarter of the calls into sqlite3 a transaction of
# three statements makes; #39): an insert into this view of the connection's own (TEMP)
# runs the trigger. Fenced like FENCED_APPEND: a newer token aborts the statement with
# FENCED_OUT. The write lock is taken before MAX(seq) is read, as for _APPEND.
FENCED_OUT = "lattice: a newer fencing token exists"
REPLY_WITH_CALL = (
    """
CREATE TEMP VIEW IF NOT EXISTS lattice_reply_with_call
    (session_id, message, run_id, call_id, attempt, at, token)
AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL""",
    f"""
CREATE TEMP TRIGGER IF NOT EXISTS lattice_reply_with_call
INSTEAD OF INSERT ON lattice_reply_with_call BEGIN
SELECT RAISE(ABORT, '{FENCED_OUT}')
WHERE NOT {_NEWEST.replace("?", "NEW.session_id")} <= NEW.token;
INSERT INTO lattice_history (session_id, seq, message)
SELECT NEW.session_id, COALESCE(MAX(seq), 0) + 1, NEW.message FROM lattice_history
WHERE session_id = NEW.session_id;
INSERT INTO lattice_run_calls (session_id, run_id, call_id, attempt, at)
VALUES (NEW.session_id, NEW.run_id, NEW.call_id, NEW.attempt, NEW.at){_UPSERT_CALL};
END""",
)
REPLY_AND_CALL = "INSERT INTO lattice_reply_with_call VALUES (?, ?, ?, ?, ?, ?, ?)"
_CALLS_OF = "SELECT call_id, attempt FROM lattice_run_calls WHERE session_id = ? AND run_id = ?"


class Encoded:
    """A stamped record (``runs.stamp``) as ``save`` writes it: the JSON text of all but
    its call journal (``text``; TypeError here, before any I/O, for what JSON cannot
    hold), and the journal (``calls``, attempts made ints: int()'s error before any I/O)."""

    __slots__ = ("record", "text", "calls")

    def __init__(self, record: Dict[str, Any]) -> None:
        calls = record.get("started_calls")
        self.calls = attempts(calls) if isinstance(calls, dict) else {}
        self.record = record
        self.text = runs.encode_record(dict(record, started_calls={}))


def unwritten(conn: sqlite3.Connection, encoded: Encoded) -> List[Any]:
    """The journal rows of ``encoded`` that differ from the stored ones (a read: usually
    none, each entry was written as its call started)."""
    if not encoded.calls:
        return []
    record = encoded.record
    sid, rid = record["session_id"], record["run_id"]
    stored = dict(conn.execute(_CALLS_OF, (sid, rid)).fetchall())
    changed = {c: a for c, a in encoded.calls.items() if stored.get(c) != a}
    return call_rows(sid, rid, changed, float(record["updated_at"]))


def save(conn: sqlite3.Connection, encoded: Encoded, token: int, rows: List[Any]) -> bool:
    """Inside a transaction if there are ``rows`` (else one statement): the record's row
    (fenced: False if a token newer than ``token`` exists) and the journal ``rows``
    (``unwritten``)."""
    record = encoded.record
    sid = record["session_id"]
    cursor = conn.execute(_UPSERT, (sid, record["run_id"], str(record.get("state")),
                                    float(record["started_at"]), float(record["updated_at"]),
                                    sid, encoded.text, sid, token))
    if cursor.rowcount != 1:
        return False
    write_calls(conn, rows)
    return True


def attempts(calls: Mapping[Any, Any]) -> Dict[str, int]:
    """A journal's entries as they are stored: call ids as str, attempts as int (a
    ``ValueError`` naming the call for an attempt that is not one, before any I/O)."""
    try:
        return {str(call_id): int(attempt) for call_id, attempt in calls.items()}
    except (TypeError, ValueError):
        call_id, attempt = next((c, a) for c, a in calls.items() if not _is_int(a))
        raise ValueError(f"the attempt of call {call_id!r} in a run's started_calls must "
                         f"be an int, got {attempt!r}") from None


def _is_int(value: Any) -> bool:
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return True


def call_rows(session_id: str, run_id: str, calls: Mapping[Any, Any], at: float
              ) -> List[Any]:
    """The journal rows of ``calls`` (a bad attempt fails before any I/O, named by
    ``attempts``; not made per tool turn: no dict on the way)."""
    try:
        return [(session_id, run_id, str(call_id), int(attempt), at)
                for call_id, attempt in calls.items()]
    except (TypeError, ValueError):
        attempts(calls)  # raises, naming the call
        raise


def write_calls(conn: sqlite3.Connection, rows: List[Any],
                token: Optional[int] = None) -> bool:
    """Insert or update the journal ``rows`` (``call_rows``), several inside a
    transaction; fenced with ``token`` if given (False: a newer one exists, nothing
    written)."""
    if token is None:
        if len(rows) == 1:  # a durable tool turn's one call
            conn.execute(_CALL, rows[0])
        elif rows:
            conn.executemany(_CALL, rows)
        return True
    fenced = [(*row, token) for row in rows]
    return conn.executemany(_FENCED_CALL, fenced).rowcount == len(rows)


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
    # order of a record's journal is only shown, never relied on).
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
