"""The SQL of ``PostgresHistoryStore`` below its methods: the tables it creates, the keys of
its advisory locks, and running one statement or one transaction on a ``Connection``.

Beside the messages table ``T``: ``T_fences(session_id, token)`` holds each session's newest
fencing token (raised on the lock's connection when the lock is taken), and
``T_runs(session_id, run_id, state, started_at, updated_at, ver, record)`` the run records.
``ver`` comes from the messages' id sequence, so the session's version (the largest of its
message ids and record vers) changes with every write of either.

Nothing here chooses a connection or retries: ``postgres.py`` does, from what these raise.
The driver is whatever made the connection (``format`` paramstyle, as psycopg, psycopg2
and pg8000 have).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, List, TypeVar

from .pg_driver import Connection

__all__ = ["create_table", "fetch", "in_transaction", "lock_key", "roll_back", "single",
           "UNDEFINED_TABLE", "Tables"]

T = TypeVar("T")

UNDEFINED_TABLE = "42P01"  # the SQLSTATE of a statement on a table that does not exist


def _key(text: str) -> int:
    """A signed 64-bit advisory-lock key for ``text``."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big",
                          signed=True)


def lock_key(table: str, session_id: str) -> int:
    """The advisory-lock key of one session of ``table``."""
    return _key(f"{table}\0{session_id}")


_DDL_KEY = _key("lattice ddl")


class Tables:
    """The names of the store's tables and the statements that use more than one."""

    def __init__(self, table: str) -> None:
        schema, _, name = table.rpartition(".")
        prefix = (schema + "." if schema else "") + name[:50]  # room for a suffix in 63
        self.messages = table
        self.index = f"{name[:50]}_session_idx"
        self.fences = f"{prefix}_fences"
        self.runs = f"{prefix}_runs"
        self.runs_index = f"{name[:50]}_runs_ver_idx"
        newest = f"COALESCE((SELECT token FROM {self.fences} WHERE session_id = %s), 0)"
        self.fence_ok = f"{newest} <= %s"
        self.bump = (f"INSERT INTO {self.fences} (session_id, token) VALUES (%s, 1) "
                     f"ON CONFLICT (session_id) DO UPDATE SET token = {self.fences}.token + 1 "
                     "RETURNING token")
        self.fenced_append = (f"INSERT INTO {table} (session_id, message) "
                              f"SELECT %s, %s WHERE {self.fence_ok}")
        self.version = (f"SELECT GREATEST((SELECT max(id) FROM {table} WHERE session_id = %s), "
                        f"(SELECT max(ver) FROM {self.runs} WHERE session_id = %s))")
        self.upsert = (
            f"INSERT INTO {self.runs} (session_id, run_id, state, started_at, updated_at, ver, "
            f"record) SELECT %s, %s, %s, %s, %s, nextval(pg_get_serial_sequence(%s, 'id')), %s "
            f"WHERE {self.fence_ok} ON CONFLICT (session_id, run_id) DO UPDATE SET "
            "state = excluded.state, updated_at = excluded.updated_at, ver = excluded.ver, "
            "record = excluded.record")

        # A message and a run record in one statement (both or neither): the record's
        # ``ver`` is the message's id, from the same sequence.
        self.append_and_upsert = (
            f"WITH m AS (INSERT INTO {table} (session_id, message) SELECT %s, %s WHERE "
            f"{self.fence_ok} RETURNING id) INSERT INTO {self.runs} (session_id, run_id, "
            "state, started_at, updated_at, ver, record) SELECT %s, %s, %s, %s, %s, m.id, %s "
            "FROM m ON CONFLICT (session_id, run_id) DO UPDATE SET state = excluded.state, "
            "updated_at = excluded.updated_at, ver = excluded.ver, record = excluded.record")

    def create(self, cur: Any) -> None:
        """Create the tables and indexes that are missing (run it in a transaction)."""
        # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog; the
        # transaction-scoped advisory lock makes the creators take turns.
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_KEY,))
        create_table(cur, self.messages, self.index)
        cur.execute(f"CREATE TABLE IF NOT EXISTS {self.fences} ("
                    "session_id TEXT PRIMARY KEY, token BIGINT NOT NULL)")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {self.runs} ("
                    "session_id TEXT NOT NULL, run_id TEXT NOT NULL, state TEXT NOT NULL, "
                    "started_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
                    "ver BIGINT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (session_id, run_id))")
        cur.execute(f"CREATE INDEX IF NOT EXISTS {self.runs_index} ON {self.runs} "
                    "(session_id, ver)")


def create_table(cur: Any, table: str, index: str) -> None:
    """Create ``table`` and its ``index`` if missing (run it in a transaction)."""
    # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog; the
    # transaction-scoped advisory lock makes the creators take turns.
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_KEY,))
    cur.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                "id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, "
                "message TEXT NOT NULL)")
    cur.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {table} (session_id, id)")


def fetch(cur: Any, sql: str, params: Any) -> List[Any]:
    """The rows of ``sql``."""
    cur.execute(sql, params)
    return list(cur.fetchall())


def single(conn: Connection, op: Callable[[Any], T], *, own_cursor: bool = False) -> T:
    """``op(cursor)`` as one statement (committed, if the driver has no autocommit)."""
    cur = conn.raw.cursor() if own_cursor else conn.cursor()
    try:
        result = op(cur)
    finally:
        if own_cursor:
            cur.close()
    if not conn.autocommit:
        conn.raw.commit()
    return result


def in_transaction(conn: Connection, op: Callable[[Any], T]) -> T:
    """``op`` in one transaction. On error the caller closes the connection, which rolls
    the transaction back on the server."""
    cur = conn.cursor()
    if conn.autocommit:
        cur.execute("BEGIN")
    result = op(cur)
    if conn.autocommit:
        cur.execute("COMMIT")
    else:
        conn.raw.commit()
    return result


def roll_back(conn: Connection) -> None:
    """End a failed transaction on a connection that stays open (it holds the lock)."""
    try:
        if conn.autocommit:
            cur = conn.raw.cursor()
            try:
                cur.execute("ROLLBACK")
            finally:
                cur.close()
        else:
            conn.raw.rollback()
    except Exception:
        pass  # not in a transaction, or the connection is going: the next use tells
