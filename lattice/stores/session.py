"""The Agent's side of the optional store capability ``lock`` (``version`` is read by
``lattice.conversation.store_link``).

Any store can be held: one without ``lock`` gets a no-op hold. A lock that cannot be taken
raises the store's error; ``lattice.conversation.store_link`` applies the store-failure policy
(``fail_on_error``) to it like to every other store call.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from .base import describe_store, logger
from .locks import check_wait

__all__ = ["SessionHold", "hold_session"]


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
        ValueError: ``wait_s`` is not a number >= 0.
        Exception: the store's own error when the lock cannot be taken for another reason
            (the store is unreachable, ...).
    """
    wait_s = check_wait(wait_s)
    lock = getattr(store, "lock", None)
    if store is None or not callable(lock):
        return SessionHold(None, store)
    cm = lock(wait_s=wait_s)
    cm.__enter__()
    return SessionHold(cm, store)
