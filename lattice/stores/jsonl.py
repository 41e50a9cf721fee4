"""JSONL history store: one JSON message per line, shared safely between processes.

On disk: the file itself and a sibling ``<path>.lock`` that ``append`` and ``replace``
hold an ``flock`` on. Why each piece is the way it is:

* Each line goes out in ONE ``os.write`` on an ``O_APPEND`` descriptor, so the kernel puts
  it at the end of the file in one piece: lines from concurrent writers never interleave,
  however long. A short write is not retried (the rest would land after someone else's
  line); it is reported as an error and the torn line is skipped by ``load``.
* A crash mid-write leaves a final line without its newline. ``load`` skips it, and the
  next ``append`` sees (by reading the last byte, under the lock) that the file does not
  end with a newline and starts its line with one, so it is not glued onto the torn line.
* The descriptor is kept open between appends, so an append costs the same whatever the
  history length. ``replace`` swaps the file for a new inode, possibly from another
  process; under the lock each append checks that the path still names the inode it holds
  and reopens if not, so no append goes into an unlinked file.
* ``replace`` writes a temp file in the same folder, fsyncs it, renames it over the file
  and fsyncs the folder: readers see the old history or the new one, never a mix.

* ``lock()`` (one query's hold on the conversation) is a byte-range lock on byte 1 of the
  same ``<path>.lock`` (see ``locks.py``): on Linux ``flock`` and byte-range locks never
  conflict, so holding the session never delays an append or a load. The lock belongs to
  the open descriptor: a paused holder keeps it and a dead one loses it, so it cannot be
  outlived and writes need no fencing check (SPEC 18).
* Run records (SPEC 17) are lines too, ``{"lattice_run": {...}}``: not messages, so an older
  reader skips them. ``save_run`` appends the whole record; the last line of a run id wins;
  ``replace`` carries each run's last record over into the new file.

Without ``fcntl`` (Windows) there is no lock and no cached descriptor (an open descriptor
would make another process's rename fail there); the rename is still atomic.
Deleting ``<path>.lock`` while processes use the store defeats the lock: leave it be.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from . import runs
from .base import Message, PathArg, check_flag, encode_message, resolve_path
from .locks import FileSessionLock, check_wait
from .shape import keep_messages

_fcntl: Any
try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None

__all__ = ["JsonlHistoryStore", "create_jsonl_history_store"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)  # Windows would otherwise turn b"\n" into b"\r\n"
_BOM = b"\xef\xbb\xbf"
_RUN_PREFIX = b'{"' + runs.RUN_KEY.encode() + b'":'  # how save_run's lines start


def _encode_line(message: Message) -> bytes:
    """``message`` as one JSON line, newline included."""
    return encode_message(message) + b"\n"


def _parse_lines(data: bytes, *, run_lines: bool = False) -> Tuple[List[Any], int]:
    """The JSON values in ``data`` and how many non-empty lines were not JSON: the
    messages, or with ``run_lines`` only the run-record lines."""
    if data.startswith(_BOM):
        data = data[len(_BOM) :]  # an editor's byte-order mark must not cost the first line
    values: List[Any] = []
    bad = 0
    # The piece after the last b"\n" is b"" or a final line cut short; it is parsed like
    # the others, so a complete line that merely lacks its newline is kept.
    for raw in data.split(b"\n"):
        if not raw or raw.startswith(_RUN_PREFIX) != run_lines:
            continue
        try:
            values.append(json.loads(raw.decode("utf-8")))
        except ValueError:  # includes UnicodeDecodeError
            bad += 1
    return values, bad


def _named(exc: OSError, path: str) -> None:
    """Make ``exc`` name ``path`` if it named no file (``os.write`` errors name none)."""
    if exc.filename is None and exc.errno is not None and exc.strerror:
        exc.filename = path


def _fsync_dir(folder: str) -> None:
    """Make a rename or a new file in ``folder`` durable (POSIX only)."""
    if os.name == "nt":
        return
    try:
        fd = os.open(folder, os.O_RDONLY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself is done
    finally:
        os.close(fd)


def _last_byte(fd: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, 1, size - 1)
    os.lseek(fd, size - 1, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, 1)  # pragma: no cover


class _Handles:
    """The descriptors a store keeps open, apart from the store so a finalizer can close
    them without keeping the store alive."""

    __slots__ = ("pid", "data_fd", "data_id", "lock_fd")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.data_fd: Optional[int] = None
        self.data_id: Tuple[int, int] = (0, 0)
        self.lock_fd: Optional[int] = None

    def close_data(self) -> None:
        if self.data_fd is not None:
            fd, self.data_fd = self.data_fd, None
            os.close(fd)

    def close(self) -> None:
        self.close_data()
        if self.lock_fd is not None:
            fd, self.lock_fd = self.lock_fd, None
            os.close(fd)


class JsonlHistoryStore:
    """One JSON message per line in ``path`` (``str`` or path-like; ``~`` is expanded).

    Creating the store touches nothing: folders, the file (mode 0600) and ``<path>.lock``
    are created on the first write, and ``load`` of a missing file returns ``[]``.

    Args:
        path: the JSONL file.
        fail_on_error: make store failures raise ``HistoryStoreError`` from the Agent.
        fsync: fsync after every append, so an acknowledged message survives a power cut
            (``replace`` always fsyncs).
    """

    def __init__(self, path: PathArg, *, fail_on_error: bool = False, fsync: bool = False) -> None:
        self.path = resolve_path(path)
        self.session_id = os.fspath(path)  # what run records name (SPEC 21a: as given)
        self.lock_path = self.path + ".lock"
        self.fail_on_error = check_flag("fail_on_error", fail_on_error)
        self.fsync = check_flag("fsync", fsync)
        self._mutex = threading.Lock()
        self._handles = _Handles()
        self._finalizer = weakref.finalize(self, self._handles.close)

    def __repr__(self) -> str:
        return f"JsonlHistoryStore({self.path!r})"

    # -- the protocol ---------------------------------------------------------------

    def load(self) -> List[Message]:
        """Every message in the file; corrupt or torn lines, and lines that are JSON but not
        history messages, are skipped and counted in a warning on the ``lattice`` logger."""
        try:
            data = self._read()
        except OSError as exc:
            _named(exc, self.path)
            raise
        if data is None:
            return []
        values, bad = _parse_lines(data)
        return keep_messages(values, f"history file {self.path}", unit="line", unreadable=bad)

    def _read(self) -> Optional[bytes]:
        """The file's bytes, read under a shared lock (None if there is no file)."""
        self._after_fork()
        with self._mutex:
            if not os.path.exists(self.path):
                return None  # nothing written yet, and loading must not create anything
            try:
                lock_fd: Optional[int] = self._lock_fd()
            except OSError:
                lock_fd = None  # e.g. a read-only folder: read without the lock
            with _flocked(lock_fd, exclusive=False):
                try:
                    with open(self.path, "rb") as f:
                        return f.read()
                except FileNotFoundError:  # removed behind our back since the check
                    return None

    def append(self, message: Message) -> None:
        """Add one line. Costs the same whatever the length of the history."""
        line = _encode_line(message)  # before any I/O: a bad message changes nothing
        try:
            self._append(line)
        except OSError as exc:
            _named(exc, self.path)
            raise

    def _append(self, line: bytes) -> None:
        self._after_fork()
        with self._mutex, _flocked(self._lock_fd(), exclusive=True):
            fd, size = self._data_fd()
            try:
                if size and _last_byte(fd, size) != b"\n":
                    line = b"\n" + line  # the last writer crashed mid-line: do not glue on
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(
                        errno.EIO,
                        f"short write to {self.path}: {written} of {len(line)} bytes "
                        "(the partial line will be skipped on load)",
                    )
                if self.fsync:
                    os.fsync(fd)
            finally:
                if os.name == "nt":  # pragma: no cover - see the module docstring
                    self._handles.close_data()

    def replace(self, messages: List[Message]) -> None:
        """Atomically make the file hold exactly ``messages``."""
        data = b"".join(_encode_line(m) for m in messages)  # fail before touching the disk
        try:
            self._replace(data)
        except OSError as exc:
            _named(exc, self.path)
            raise

    def _replace(self, data: bytes) -> None:
        self._after_fork()
        folder = os.path.dirname(self.path)
        with self._mutex, _flocked(self._lock_fd(), exclusive=True):
            data += b"".join(runs.record_line(r) for r in self._runs_unlocked().values())
            tmp = f"{self.path}.{os.getpid()}-{os.urandom(4).hex()}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC | _BINARY, 0o600)
                try:
                    view = memoryview(data)
                    while view:  # a private file: finishing a short write here is safe
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                # Our descriptor names the inode about to be unlinked; on Windows it would
                # also make the rename fail.
                self._handles.close_data()
                os.replace(tmp, self.path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            _fsync_dir(folder)

    # -- run records (SPEC 17) ----------------------------------------------------------

    def load_run(self, run_id: str) -> Optional[Dict[str, Any]]:
        """The last record of run ``run_id`` in the file, or None."""
        return self._runs().get(run_id)

    def save_run(self, record: Dict[str, Any]) -> None:
        """Append ``record`` as a run line (the last line of a run id is its record)."""
        line = runs.record_line(runs.stamp(record, self.session_id))  # before any I/O
        try:
            self._append(line)
        except OSError as exc:
            _named(exc, self.path)
            raise

    def append_and_save_run(self, message: Message, record: Dict[str, Any]) -> None:
        """``save_run(record)`` and ``append(message)`` in one write (a durable run's prompt
        with its record, a reply with the journal entry of the call it starts): the record's
        line first, so a crash between the two leaves the record, never the message without
        it (a partial last line is skipped on load)."""
        data = runs.record_line(runs.stamp(record, self.session_id)) + _encode_line(message)
        try:
            self._append(data)
        except OSError as exc:
            _named(exc, self.path)
            raise

    def list_runs(self, state: Optional[str] = None) -> List[Dict[str, Any]]:
        """The file's run records (of ``state``, if given), oldest first."""
        runs.check_state(state)
        return runs.select(self._runs().values(), state)

    def _runs(self) -> Dict[str, Dict[str, Any]]:
        try:
            data = self._read()
        except OSError as exc:
            _named(exc, self.path)
            raise
        return {} if data is None else _latest_runs(data)

    def _runs_unlocked(self) -> Dict[str, Dict[str, Any]]:
        """``_runs`` for a caller already holding the mutex and the exclusive flock."""
        try:
            with open(self.path, "rb") as f:
                return _latest_runs(f.read())
        except FileNotFoundError:
            return {}

    # -- the optional capabilities ------------------------------------------------------

    def lock(self, *, wait_s: float = 0.0) -> FileSessionLock:
        """Hold this conversation for one query, across threads and processes (a lock on
        byte 1 of ``<path>.lock``; appends and loads do not wait for it). Entering raises
        ``ConcurrentQueryError`` if another holder keeps it past ``wait_s`` seconds."""
        return FileSessionLock(self.lock_path, check_wait(wait_s), f"history file {self.path}")

    def version(self) -> Optional[Tuple[int, int, int, int, int]]:
        """``(device, inode, size, mtime_ns, ctime_ns)`` of the file, None if there is none:
        an append grows it, a replace puts a new inode in place."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            _named(exc, self.path)
            raise
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    # -- housekeeping ---------------------------------------------------------------

    def close(self) -> None:
        """Close the cached descriptors (reopened if the store is used again)."""
        with self._mutex:
            self._handles.close()

    def __enter__(self) -> JsonlHistoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------

    def _after_fork(self) -> None:
        """Drop what a forked child inherited: its descriptors share the parent's open file
        descriptions, so an ``flock`` through them would not exclude the parent (and the
        mutex may have been held by a parent thread that does not exist here)."""
        handles = self._handles
        if handles.pid == os.getpid():
            return
        self._finalizer.detach()
        handles.close()  # closes only this process's copies; the parent keeps its lock
        self._handles = _Handles()
        self._finalizer = weakref.finalize(self, self._handles.close)
        self._mutex = threading.Lock()

    def _lock_fd(self) -> Optional[int]:
        if _fcntl is None:  # pragma: no cover - Windows
            return None
        handles = self._handles
        if handles.lock_fd is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            handles.lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o600)
        return handles.lock_fd

    def _data_fd(self) -> Tuple[int, int]:
        """A descriptor on the file the path names now, and that file's size (call with the
        lock held)."""
        handles = self._handles
        try:
            st: Optional[os.stat_result] = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and handles.data_fd is not None:
            if (st.st_dev, st.st_ino) == handles.data_id:
                return handles.data_fd, st.st_size
        # First use, or the path names another file now (a replace, here or elsewhere).
        handles.close_data()
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _CLOEXEC | _BINARY
        fd = os.open(self.path, flags, 0o600)
        created = st is None
        st = os.fstat(fd)
        handles.data_fd, handles.data_id = fd, (st.st_dev, st.st_ino)
        if created and self.fsync:
            _fsync_dir(os.path.dirname(self.path))  # the new directory entry, too
        return fd, st.st_size


def _latest_runs(data: bytes) -> Dict[str, Dict[str, Any]]:
    """Each run id's last record among the run lines of ``data``."""
    return runs.latest(_parse_lines(data, run_lines=True)[0])


class _flocked:
    """``with _flocked(fd, exclusive=...)``: hold an ``flock`` on ``fd`` (None: no lock).

    A class rather than ``@contextmanager`` because it sits on the append path.
    """

    __slots__ = ("fd", "exclusive")

    def __init__(self, fd: Optional[int], *, exclusive: bool) -> None:
        self.fd = fd  # None also where there is no fcntl: _lock_fd returns None there
        self.exclusive = exclusive

    def __enter__(self) -> None:
        if self.fd is not None:
            _fcntl.flock(self.fd, _fcntl.LOCK_EX if self.exclusive else _fcntl.LOCK_SH)

    def __exit__(self, *exc_info: object) -> None:
        if self.fd is not None:
            _fcntl.flock(self.fd, _fcntl.LOCK_UN)


def create_jsonl_history_store(
    path: PathArg, *, fail_on_error: bool = False, fsync: bool = False
) -> JsonlHistoryStore:
    """A ``JsonlHistoryStore`` on ``path`` (see there). Does no I/O."""
    return JsonlHistoryStore(path, fail_on_error=fail_on_error, fsync=fsync)
