"""Session locks: the one-query-per-conversation guard across processes and hosts.

Every store's ``lock(*, wait_s=0.0)`` returns a context manager built from the pieces here:
``wait_s`` is checked by ``check_wait``; a holder that cannot get the session at once tries
again with a growing pause (``poll``) until ``wait_s`` has passed, then raises
``ConcurrentQueryError``. What "holding" means is the store's:

* JSONL: an open-file-description (OFD) lock on byte 1 of ``<path>.lock``. Appends hold an
  ``flock`` on the same file, which on Linux never conflicts with a byte-range lock, so the
  holder's own appends (and everybody's loads) go on. The kernel drops the lock when the
  holder's descriptor closes, so a killed process frees the session at once. Where OFD locks
  do not exist (macOS, BSD, 32-bit builds) a classic POSIX record lock is used, plus a
  process-wide table so two holders in one process still exclude each other.
* SQLite: a lease row renewed by a heartbeat thread (``sqlite_lease``).
* PostgreSQL: an advisory lock on a connection of its own (``postgres``).
* Memory: a ``threading.Lock``.
"""

from __future__ import annotations

import errno
import math
import os
import struct
import sys
import threading
import time
from typing import Any, Callable, Optional, Set, Tuple

from ..errors import ConcurrentQueryError

__all__ = ["check_wait", "poll", "busy", "FileSessionLock", "MemorySessionLock"]

_fcntl: Any
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FIRST_PAUSE_S = 0.002
_MAX_PAUSE_S = 0.1  # a waiter notices a release within this


def check_wait(wait_s: Any) -> float:
    """``wait_s`` as a float, or ``ValueError`` naming it."""
    if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)):
        raise ValueError(f"wait_s must be a number of seconds >= 0, got {wait_s!r}")
    if not math.isfinite(wait_s) or wait_s < 0:
        raise ValueError(f"wait_s must be a number of seconds >= 0, got {wait_s!r}")
    return float(wait_s)


def poll(try_once: Callable[[], bool], wait_s: float, what: str) -> None:
    """Call ``try_once`` until it returns True; raise ``ConcurrentQueryError`` naming
    ``what`` once ``wait_s`` seconds have passed without success."""
    deadline = time.monotonic() + wait_s
    pause = _FIRST_PAUSE_S
    while not try_once():
        left = deadline - time.monotonic()
        if left <= 0:
            raise busy(what, wait_s)
        time.sleep(min(pause, left))
        pause = min(pause * 2, _MAX_PAUSE_S)


def busy(what: str, wait_s: float) -> ConcurrentQueryError:
    """The error for a session another holder kept past ``wait_s``."""
    return ConcurrentQueryError(
        f"{what} is busy: another query of this conversation is running "
        f"(waited {wait_s:g} s; session_lock_wait_s sets how long to wait)"
    )


# -- JSONL: a byte-range lock on <path>.lock ---------------------------------------------

_OFD = (
    _fcntl is not None
    and sys.platform.startswith("linux")
    and hasattr(_fcntl, "F_OFD_SETLK")
    and struct.calcsize("P") == 8
)
# struct flock on 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t),
# l_pid (pid_t, 0 for OFD locks), padded to 32 bytes.
_FLOCK = "hhqqi4x"
_SESSION_BYTE = 1  # byte 0 is left free; appends use flock on the whole file

_held_here: Set[Tuple[int, int]] = set()  # classic locks do not exclude within a process
_held_mutex = threading.Lock()


def _try_range_lock(fd: int) -> bool:
    """Take the session byte of ``fd`` without waiting; False if someone holds it."""
    try:
        if _OFD:
            request = struct.pack(_FLOCK, _fcntl.F_WRLCK, os.SEEK_SET, _SESSION_BYTE, 1, 0)
            _fcntl.fcntl(fd, _fcntl.F_OFD_SETLK, request)
        else:  # pragma: no cover - not Linux
            _fcntl.lockf(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB, 1, _SESSION_BYTE, os.SEEK_SET)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


_TOKEN_AT = 8  # bytes 0-7 of the lock file are left alone (byte 1 is the session's)


def _next_token(fd: int) -> int:
    """Raise the acquisition counter in ``fd``'s file (call with the session byte held)."""
    raw = os.pread(fd, 8, _TOKEN_AT)
    token = (int.from_bytes(raw, "big") if len(raw) == 8 else 0) + 1
    os.pwrite(fd, token.to_bytes(8, "big"), _TOKEN_AT)
    return token


class FileSessionLock:
    """``with FileSessionLock(lock_path, wait_s, what)``: hold the session byte of
    ``lock_path`` (created, with its folder, if missing) on a descriptor of its own.

    The lock belongs to the open descriptor, so it cannot be outlived: a paused holder
    keeps it (others wait), a dead one loses it with its descriptor. ``token`` counts the
    acquisitions, kept in bytes 8-15 of the lock file and raised under the lock; ``lost``
    is never set.
    """

    __slots__ = ("lock_path", "wait_s", "what", "token", "lost", "_fd", "_key")

    def __init__(self, lock_path: str, wait_s: float, what: str) -> None:
        self.lock_path = lock_path
        self.wait_s = wait_s
        self.what = what
        self.token = 0
        self.lost = False
        self._fd: Optional[int] = None
        self._key: Optional[Tuple[int, int]] = None

    def __enter__(self) -> FileSessionLock:
        if _fcntl is None:  # pragma: no cover - Windows: no cross-process lock
            return self
        os.makedirs(os.path.dirname(self.lock_path), exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            poll(lambda: self._try(fd, key), self.wait_s, self.what)
            self.token = _next_token(fd)
        except BaseException:
            self._fd = fd
            self.__exit__()
            raise
        self._fd = fd
        return self

    def _try(self, fd: int, key: Tuple[int, int]) -> bool:
        if _OFD:
            return _try_range_lock(fd)
        with _held_mutex:  # pragma: no cover - not Linux
            if key in _held_here or not _try_range_lock(fd):
                return False
            _held_here.add(key)
            self._key = key
            return True

    def __exit__(self, *exc_info: object) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        # Closing the descriptor drops the lock (for a classic lock: this process's lock,
        # which is why _held_here stops a second holder here from taking it meanwhile).
        with _held_mutex:
            os.close(fd)
            if self._key is not None:
                _held_here.discard(self._key)
                self._key = None


# -- memory -------------------------------------------------------------------------------


class MemorySessionLock:
    """``with MemorySessionLock(mutex, wait_s, what, next_token)``: hold ``mutex`` (a
    ``threading.Lock``, so any thread may release it) for one query; ``token`` is
    ``next_token()`` of the acquisition. A held mutex cannot be outlived: never ``lost``."""

    __slots__ = ("mutex", "wait_s", "what", "next_token", "token", "lost", "_held")

    def __init__(self, mutex: Any, wait_s: float, what: str,
                 next_token: Callable[[], int]) -> None:
        self.mutex = mutex
        self.wait_s = wait_s
        self.what = what
        self.next_token = next_token
        self.token = 0
        self.lost = False
        self._held = False

    def __enter__(self) -> MemorySessionLock:
        got = self.mutex.acquire(timeout=self.wait_s) if self.wait_s else self.mutex.acquire(False)
        if not got:
            raise busy(self.what, self.wait_s)
        self._held = True
        self.token = self.next_token()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._held:
            self._held = False
            self.mutex.release()
