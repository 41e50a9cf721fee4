"""Where ``OAuth`` keeps tokens and client registrations: any object with ``load(key)`` and
``save(key, value)`` (values are JSON-able dicts). ``MemoryTokenStore`` is the default;
``FileTokenStore(path)`` keeps them in one JSON file, mode 0600, written whole and renamed
into place, and offers ``lock(key)`` so that two processes refreshing one token at once
take turns: the second finds the first's new token instead of spending a refresh token
the server has already rotated.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from typing import Any, Dict, Iterator, Optional, Union

__all__ = ["MemoryTokenStore", "FileTokenStore"]


class MemoryTokenStore:
    """Tokens in this process's memory (gone when it exits)."""

    def __init__(self) -> None:
        self._values: Dict[str, Dict[str, Any]] = {}
        self._lock = threading.RLock()

    def load(self, key: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            value = self._values.get(key)
            return json.loads(json.dumps(value)) if value is not None else None

    def save(self, key: str, value: Optional[Dict[str, Any]]) -> None:
        with self._lock:
            if value is None:
                self._values.pop(key, None)
            else:
                self._values[key] = json.loads(json.dumps(value))

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        with self._lock:
            yield

    def __repr__(self) -> str:
        return f"<MemoryTokenStore {len(self._values)} key(s)>"  # never the tokens


class FileTokenStore:
    """Tokens in a JSON file only its owner may read (mode 0600), shared by processes."""

    def __init__(self, path: Union[str, os.PathLike[str]]) -> None:
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise ValueError(f"FileTokenStore needs a file path, got {path!r}")
        self.path = os.path.abspath(os.fspath(path))
        self._local = threading.RLock()
        self._depth = 0  # how deep this process is in lock() (under _local)

    def _read(self) -> Dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as file:
                data = json.load(file)
        except FileNotFoundError:
            return {}
        except ValueError:
            raise ValueError(f"the token file {self.path} is not JSON; remove it to sign in "
                             "again") from None
        return data if isinstance(data, dict) else {}

    def load(self, key: str) -> Optional[Dict[str, Any]]:
        with self._local:
            value = self._read().get(key)
        return value if isinstance(value, dict) else None

    def save(self, key: str, value: Optional[Dict[str, Any]]) -> None:
        with self.lock(key):
            data = self._read()
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
            folder = os.path.dirname(self.path)
            fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=folder)
            try:
                os.fchmod(fd, 0o600)  # before a byte is written
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    json.dump(data, file)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the file's lock (this process's threads and other processes) while a
        token is read, refreshed and written back. Reentrant: ``save`` inside it does not
        lock again (a second ``flock`` on a new descriptor would wait for the first)."""
        with self._local:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                try:
                    import fcntl
                except ImportError:  # pragma: no cover - Windows: this process only
                    fcntl = None  # type: ignore[assignment]
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0
                    if fcntl is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"<FileTokenStore {self.path!r}>"
