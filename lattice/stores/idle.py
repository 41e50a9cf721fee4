"""Idle connections kept for reuse: the one pool of the SQLite and PostgreSQL stores.

A store borrows a connection for one operation and gives it back; up to 8 stay open, so a
thread-per-request server reuses a handful rather than opening one per thread.

- A connection given back after an error, or that the owner's ``reusable`` test refuses
  (SQLite: still in a transaction), is closed instead of kept.
- ``close()`` closes the idle connections now, and those out on loan when they come back.
- After a fork the child never touches its parent's connections (SQLite forbids using
  them; a PostgreSQL socket shared with the parent would end the parent's session): they
  are only kept referenced, and the child opens its own.
- A pool nobody closed closes its idle connections when it is collected (Python 3.13
  warns about SQLite connections left to the garbage collector).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable, Generic, List, Optional, Protocol, TypeVar

__all__ = ["IdlePool", "Loan"]

MAX_IDLE = 8


class _Closable(Protocol):
    def close(self) -> Any: ...


C = TypeVar("C", bound=_Closable)

# Bumped in a forked child (cheaper than comparing os.getpid(), a system call, per borrow).
_forks = [0]


def _after_fork() -> None:
    _forks[0] += 1


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork either
    os.register_at_fork(after_in_child=_after_fork)


class Loan(Generic[C]):
    """A borrowed connection: ``.conn``, whether it was ``.reused`` (idle) or is new, and,
    as a context manager, given back on success or closed on an exception."""

    __slots__ = ("pool", "conn", "reused", "generation")

    def __init__(self, pool: IdlePool[C], conn: C, *, reused: bool, generation: int) -> None:
        self.pool = pool
        self.conn = conn
        self.reused = reused
        self.generation = generation

    def __enter__(self) -> C:
        return self.conn

    def __exit__(self, exc_type: Any, *rest: object) -> None:
        self.pool.give_back(self, ok=exc_type is None)


class IdlePool(Generic[C]):
    """Idle connections made by ``connect``.

    Args:
        connect: opens a new connection.
        alive: whether an idle connection may still be used (checked when it is borrowed;
            a dead one is closed and the next tried).
        reusable: whether a connection given back may be kept (else it is closed).
    """

    def __init__(self, connect: Callable[[], C], *, alive: Optional[Callable[[C], bool]] = None,
                 reusable: Optional[Callable[[C], bool]] = None) -> None:
        self._connect = connect
        self._alive = alive
        self._reusable = reusable
        self._lock = threading.Lock()
        self._idle: List[C] = []  # only ever changed in place: the finalizer holds it
        self._forks = _forks[0]
        self._generation = 0
        self._inherited: List[C] = []  # a parent's connections, never touched here
        weakref.finalize(self, _close_all, self._idle)

    def borrow(self) -> Loan[C]:
        """A connection for one operation: an idle one that looks alive, else a new one."""
        while True:
            with self._lock:
                if self._forks != _forks[0]:  # we are a child of the process that made us
                    self._inherited.extend(self._idle)
                    self._idle.clear()
                    self._forks = _forks[0]
                generation = self._generation
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return Loan(self, self._connect(), reused=False, generation=generation)
            if self._alive is None or self._alive(conn):
                return Loan(self, conn, reused=True, generation=generation)
            conn.close()

    def give_back(self, loan: Loan[C], *, ok: bool = True) -> None:
        """Keep ``loan``'s connection for the next borrower, or close it (after an error,
        when not ``reusable``, after ``close()`` or a fork, or when 8 are idle already)."""
        conn = loan.conn
        if ok and (self._reusable is None or self._reusable(conn)):
            with self._lock:
                if (loan.generation == self._generation and self._forks == _forks[0]
                        and len(self._idle) < MAX_IDLE):
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        """Close the idle connections, and those on loan when they are given back."""
        with self._lock:
            idle = self._idle[:]
            self._idle.clear()
            self._generation += 1
        _close_all(idle)


def _close_all(connections: List[Any]) -> None:
    while connections:
        connections.pop().close()
