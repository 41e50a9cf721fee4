"""The Agent's side of the optional store capabilities ``lock`` and ``version``.

Both work on any store: one without the capability gets a no-op hold and is never stale.
Failures follow the store's ``fail_on_error`` like every other store call.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Tuple

from ..errors import ConcurrentQueryError, HistoryStoreError
from .base import describe_store, logger
from .locks import check_wait

__all__ = ["SessionHold", "hold_session", "read_version", "is_stale"]


class SessionHold:
    """A session lock taken by ``hold_session``; ``release()`` gives it back (idempotent,
    from any thread, never raises)."""

    __slots__ = ("_cm", "_store", "_mutex")

    def __init__(self, cm: Any, store: Any) -> None:
        self._cm = cm
        self._store = store
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        """False for a store without ``lock``, a lock that could not be taken and was
        forgiven (``fail_on_error`` False), or once released."""
        return self._cm is not None

    @property
    def token(self) -> Optional[int]:
        """The fencing token of this acquisition (None without a held lock)."""
        token = getattr(self._cm, "token", None)
        return token if isinstance(token, int) else None

    @property
    def lost(self) -> bool:
        """True once the store found that another holder took the session over (SPEC 18):
        the query ends at its next step with ``LockLostError``."""
        return bool(getattr(self._cm, "lost", False))

    def release(self) -> None:
        with self._mutex:
            cm, self._cm = self._cm, None
        if cm is None:
            return
        try:
            cm.__exit__(None, None, None)
        except Exception:
            # Releasing runs in finally blocks; a store that cannot be reached has lost
            # the lock anyway (a closed descriptor, an expired lease, a dead connection).
            logger.warning("history store %s: releasing the session lock failed",
                           describe_store(self._store), exc_info=True)

    def __enter__(self) -> SessionHold:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def hold_session(store: Any, wait_s: float = 0.0) -> SessionHold:
    """Take ``store``'s session lock for one query.

    Raises:
        ConcurrentQueryError: another holder kept the session past ``wait_s`` seconds.
        HistoryStoreError: the lock could not be taken for another reason (the store is
            unreachable, ...) and ``store.fail_on_error`` is true; otherwise that failure is
            logged at WARNING and the query runs without the lock.
        ValueError: ``wait_s`` is not a number >= 0.
    """
    wait_s = check_wait(wait_s)
    lock = getattr(store, "lock", None)
    if store is None or not callable(lock):
        return SessionHold(None, store)
    try:
        cm = lock(wait_s=wait_s)
        cm.__enter__()
    except ConcurrentQueryError:
        raise
    except Exception as exc:
        if getattr(store, "fail_on_error", False):
            raise HistoryStoreError(
                f"history store lock failed: {exc} (store: {describe_store(store)})"
            ) from exc
        logger.warning("history store lock failed (store: %s); this query runs without the "
                       "session lock", describe_store(store), exc_info=True)
        return SessionHold(None, store)
    return SessionHold(cm, store)


def read_version(store: Any) -> Optional[Any]:
    """``store.version()``, or None when the store has no ``version`` or it failed (logged
    at WARNING)."""
    ok, now = _try_version(store)
    return now if ok else None


def is_stale(store: Any, seen: Any) -> bool:
    """Whether someone else wrote ``store`` since this Agent saw version ``seen``.

    ``seen`` is what ``read_version`` returned right after this Agent's last load or write.
    True only when the store reports its version now and it differs from ``seen``: a store
    without ``version``, or whose version cannot be read (logged), is never stale, so a
    store that is down never makes the Agent drop the history it holds.
    """
    ok, now = _try_version(store)
    return ok and bool(now != seen)


def _try_version(store: Any) -> Tuple[bool, Any]:
    version = getattr(store, "version", None)
    if store is None or not callable(version):
        return False, None
    try:
        return True, version()
    except Exception:
        logger.warning("history store %s: reading its version failed",
                       describe_store(store), exc_info=True)
        return False, None
