"""The SQLite store's run records and fencing tokens, below its methods (SPEC 17, 18).

Two tables beside the messages:

* ``lattice_history_fences(session_id, token)``: the newest fencing token of each session,
  raised in the transaction that takes the session's lease (``sqlite_lease``). A write made
  under a lease checks, in the same transaction, that no newer token exists: a holder that
  was paused past its lease cannot write after another one took the session.
* ``lattice_runs(session_id, run_id, state, started_at, updated_at, ver, record)``: one row
  per run, ``record`` the JSON text; ``ver`` rises with every save in the session, so the
  session's ``version()`` changes when a run record does.

Every function takes an open connection; the caller borrows it and opens transactions.
``Naming`` makes SQLite's errors name the database and session, and a file that is not an
SQLite database (or a damaged one) a ``HistoryStoreError`` (SPEC 21b).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..errors import HistoryStoreError
from . import runs

if TYPE_CHECKING:
    import sqlite3

__all__ = ["SCHEMA", "FENCED_APPEND", "NO_FENCE", "bump_fence", "fence_ok", "save_run",
           "load_run",
           "list_runs", "Naming"]

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


def save_run(conn: sqlite3.Connection, record: Dict[str, Any], text: str, token: int) -> bool:
    """Upsert ``record`` (stamped by ``runs.stamp``; ``text``, its encoding) unless a token
    newer than ``token`` exists; False if refused."""
    sid = record["session_id"]
    cursor = conn.execute(_UPSERT, (sid, record["run_id"], str(record.get("state")),
                                    float(record["started_at"]), float(record["updated_at"]),
                                    sid, text, sid, token))
    return bool(cursor.rowcount == 1)


def load_run(conn: sqlite3.Connection, session_id: str, run_id: str) -> Optional[Dict[str, Any]]:
    row = conn.execute("SELECT record FROM lattice_runs WHERE session_id = ? AND run_id = ?",
                       (session_id, run_id)).fetchone()
    return None if row is None else runs.decode_record(row[0], run_id)


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
    found = [runs.decode_record(text) for (text,) in rows]
    return [r for r in found if r is not None]


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
