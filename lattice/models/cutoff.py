"""Cutting a blocked HTTP call from another thread, by shutting its socket down.

A thread blocked in ``recv`` cannot be interrupted, but once another thread shuts the
socket down the ``recv`` returns at once. ``HeldCall`` is one model call's hold on the
connection it is using: the abort signal's callback and the deadline timer call
``cut()``. The HTTP layer reports which connection a call uses: ``attach(conn)`` when a
connection starts a request for the calling thread's active call, ``detach(conn)`` when
it goes back to the pool, so a late cut never hits a connection another call now uses.
Connections are duck-typed (anything with a ``sock``); nothing here imports ``requests``.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, List, Optional

from .base import ModelRequest

__all__ = ["HeldCall", "attach", "detach", "cut_if_needed", "shutdown"]

_owner_lock = threading.Lock()  # guards every connection's owner and every call's state
_local = threading.local()  # the active call of this thread, for attach()


class HeldCall:
    """One call: its request (None for an MCP message), secrets, deadline, and the
    connection it holds."""

    def __init__(self, request: Optional[ModelRequest], secrets: List[str],
                 deadline: Optional[float]) -> None:
        self.request = request
        self.secrets = secrets
        self.deadline = deadline
        self.conn: Any = None
        self.response: Any = None  # set once headers came (the fallback for user sessions)
        self.cause: Optional[str] = None  # "abort", "timeout" or "closed" once cut
        self.done = False

    def activate(self) -> None:
        """Connections that start a request on this thread now belong to this call."""
        _local.call = self

    def abort(self) -> None:
        self.cut("abort")

    def expire(self) -> None:
        self.cut("timeout")

    def cut(self, cause: str) -> None:
        """Record why the call must stop and shut its socket down (first cause wins)."""
        with _owner_lock:
            if self.done or self.cause is not None:
                return
            self.cause = cause
            conn = self.conn
            if conn is not None and getattr(conn, "_lattice_call", self) is not self:
                conn = None  # another call's now: never cut that
            if conn is None and self.response is not None:  # a session we did not make
                conn = getattr(self.response.raw, "_connection", None)
            shutdown(conn)

    def finish(self) -> None:
        """The call is over: later cuts do nothing, and its connection is let go."""
        if getattr(_local, "call", None) is self:
            _local.call = None
        with _owner_lock:
            self.done = True
            if self.conn is not None and getattr(self.conn, "_lattice_call", None) is self:
                self.conn._lattice_call = None
            self.conn = self.response = None


def shutdown(conn: Any) -> None:
    """Shut down ``conn.sock`` for reading and writing (no error if it is gone)."""
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:  # the plain socket's shutdown: SSLSocket's drops its SSL state under the reader
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


def attach(conn: Any) -> None:
    """``conn`` starts a request: it belongs to this thread's active call (if any)."""
    call = getattr(_local, "call", None)
    with _owner_lock:
        conn._lattice_call = call
        if call is not None and not call.done:
            call.conn = conn
            if call.cause is not None:
                shutdown(conn)


def detach(conn: Any) -> None:
    """``conn`` goes back to the pool: no call may cut it any more."""
    with _owner_lock:
        call = getattr(conn, "_lattice_call", None)
        if call is not None:
            conn._lattice_call = None
            if call.conn is conn:
                call.conn = None


def cut_if_needed(conn: Any) -> None:
    """After ``conn`` connected: honour a cut that came while it was connecting."""
    with _owner_lock:
        call = getattr(conn, "_lattice_call", None)
        if call is not None and call.cause is not None and not call.done:
            shutdown(conn)
