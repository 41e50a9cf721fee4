"""Connections for ``PostgresHistoryStore``: which driver, its pool of idle connections (an
``idle.IdlePool`` that drops connections the server ended), and telling a lost connection
from other errors.

The driver (``psycopg`` 3, else ``pg8000``, or the host's ``connect`` callable) is imported
on first use only. Idle connections are checked before reuse without a round trip: a
connection the server ended (restart, ``pg_terminate_backend``, idle timeout) has its
socket readable (the server's goodbye, then end-of-file), while a healthy idle one has
nothing to read. So the first statement after a loss goes to a fresh connection instead
of failing.
"""

from __future__ import annotations

import functools
import importlib
import select
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .idle import IdlePool
from .pg_conninfo import pg8000_arguments

__all__ = ["Connection", "Pool", "connection_lost", "ended_by_server", "shared_pool", "DRIVERS"]

DRIVERS = ("psycopg", "pg8000")
# SQLSTATEs after which the connection is gone: class 08 (connection exception), and the
# server shutting down or crashing (57P01-57P03).
_GONE_STATES = ("57P01", "57P02", "57P03")


class Connection:
    """A DB-API connection and what the store needs to know about it."""

    __slots__ = ("raw", "autocommit", "fd", "_cursor")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.autocommit = _set_autocommit(raw)
        self.fd = _socket_fd(raw)
        self._cursor: Any = None

    def cursor(self) -> Any:
        """A cursor kept with the connection: making one per append is a measurable part of
        an append's cost. (``load`` uses one of its own, so a big result is not kept.)"""
        if self._cursor is None:
            self._cursor = self.raw.cursor()
        return self._cursor

    def looks_alive(self) -> bool:
        """False if the server has closed (or is closing) this idle connection."""
        if self.fd is None:  # cannot look at the socket: ask the driver, else the first
            # statement will tell
            return not (getattr(self.raw, "closed", False) or getattr(self.raw, "broken", False))
        try:
            readable, _, _ = select.select([self.fd], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def close(self) -> None:
        try:
            self.raw.close()
        except Exception:
            pass  # closing a broken connection may fail; it is dropped either way


def _set_autocommit(raw: Any) -> bool:
    try:
        raw.autocommit = True
    except Exception:
        return False  # a driver without it: the store commits after each operation
    return bool(getattr(raw, "autocommit", False))


def _socket_fd(raw: Any) -> Optional[int]:
    """The connection's socket, for the idle check (psycopg: ``fileno()``; pg8000 keeps it
    in ``_usock``); None when the driver does not show it."""
    for owner, name in ((raw, "fileno"), (getattr(raw, "_usock", None), "fileno")):
        try:
            fd = getattr(owner, name)()
        except Exception:
            continue
        if isinstance(fd, int) and fd >= 0:
            return fd
    return None


def connection_lost(exc: BaseException, conn: Optional[Connection]) -> bool:
    """Whether ``exc`` means the connection is gone (as opposed to a bad statement)."""
    seen: List[BaseException] = []
    current: Optional[BaseException] = exc
    while current is not None and current not in seen:  # pg8000 chains the socket error
        seen.append(current)
        if isinstance(current, (OSError, EOFError)):
            return True
        state = sqlstate(current)
        if state is not None and (state.startswith("08") or state in _GONE_STATES):
            return True
        if type(current).__name__ == "InterfaceError":  # pg8000 "network error", closed
            return True
        current = current.__cause__ or current.__context__
    raw = conn.raw if conn is not None else None
    return bool(getattr(raw, "broken", False) or getattr(raw, "closed", False))


def ended_by_server(exc: BaseException) -> bool:
    """Whether the server ended the connection instead of running the statement: it says
    so (SQLSTATE 57P01-57P03, "terminating connection due to administrator command") when it
    shuts down or a backend is terminated, and checks for that before executing, and never
    inside a commit. Unlike a bare dropped socket, this does not leave it unknown whether
    an ``INSERT`` was committed, so even an append may be retried."""
    current: Optional[BaseException] = exc
    seen: List[BaseException] = []
    while current is not None and current not in seen:
        seen.append(current)
        if sqlstate(current) in _GONE_STATES:
            return True
        current = current.__cause__ or current.__context__
    return False


def sqlstate(exc: BaseException) -> Optional[str]:
    """The SQLSTATE of a driver error (psycopg: ``.sqlstate``; pg8000: ``args[0]['C']``)."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        return state
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], dict) and isinstance(args[0].get("C"), str):
        return str(args[0]["C"])
    return None


def driver_connector(conninfo: str, params: Dict[str, str], driver: Optional[str]) -> Callable[
        [], Any]:
    """A no-argument function opening a raw connection with the chosen (or first
    installed) driver. Imports nothing until called."""

    def connect() -> Any:
        name, module = _import_driver(driver)
        if name == "psycopg":
            return module.connect(conninfo, autocommit=True)
        return module.connect(**pg8000_arguments(params))

    return connect


def _import_driver(driver: Optional[str]) -> Tuple[str, Any]:
    for name in (driver,) if driver else DRIVERS:
        try:
            module = importlib.import_module("pg8000.dbapi" if name == "pg8000" else name)
        except ImportError:
            continue
        return name, module
    wanted = driver or "psycopg or pg8000"
    raise ModuleNotFoundError(
        f"PostgresHistoryStore needs the {wanted} package: pip install "
        "'agent-lattice[postgres]' (psycopg), or pg8000, or pass connect="
    )


class Pool(IdlePool[Connection]):
    """Idle connections opened by one ``connect`` function (an idle one the server closed
    is dropped when borrowed), and the tables known to exist through them."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        super().__init__(functools.partial(_open, connect), alive=Connection.looks_alive)
        self.ready_tables: Set[str] = set()


def _open(connect: Callable[[], Any]) -> Connection:
    return Connection(connect())


_shared: Dict[Tuple[Optional[str], str], Pool] = {}
_shared_lock = threading.Lock()


def shared_pool(conninfo: str, params: Dict[str, str], driver: Optional[str]) -> Pool:
    """The process's pool for ``conninfo``: stores made per request reuse connections."""
    key = (driver, conninfo)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None:
            pool = _shared[key] = Pool(driver_connector(conninfo, params, driver))
        return pool
