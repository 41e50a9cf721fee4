"""The SQL of ``PostgresHistoryStore`` below its methods: the table it creates, the keys of
its advisory locks, and running one statement or one transaction on a ``Connection``.

Nothing here chooses a connection or retries: ``postgres.py`` does, from what these raise.
The driver is whatever made the connection (``format`` paramstyle, as psycopg, psycopg2
and pg8000 have).
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, List, TypeVar

from .pg_driver import Connection

__all__ = ["create_table", "fetch", "in_transaction", "lock_key", "roll_back", "single",
           "UNDEFINED_TABLE"]

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
