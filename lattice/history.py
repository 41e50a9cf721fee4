"""The conversation: the history list, its provider-ready twin, and the store behind it.

Memory is the truth; the store follows it. Rules (SPEC 10a), the same for every store:

- A message is saved to the store first and kept in memory after, so with
  ``fail_on_error=True`` a failed write raises and is kept nowhere: memory, store and
  what the caller was shown agree.
- With ``fail_on_error=False`` the first failure is logged once (WARNING, logger
  ``lattice``, naming the cause) and the store gets nothing more: memory only.
- Store I/O is serialised by ``io`` and never runs under the query's lock. A write that
  finishes after its query ended leaves the store one step ahead of memory; the history
  is then ``diverged`` and the next store operation rewrites the store from memory.

``sendable`` holds one ``{"role", "content"}`` dict per entry, made once when the entry is
written, so building a request copies a list of references.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any, Dict, List, Optional

from .errors import HistoryStoreError
from .messages import sendable
from .stores.session import is_stale, read_version
from .usage import Usage

__all__ = ["History"]

log = logging.getLogger("lattice")
Message = Dict[str, Any]
_UNREAD: Any = object()  # History.version before the store was first read or written


class History:
    """The messages of one Agent, mirrored into its store (if any)."""

    def __init__(self, store: Any = None) -> None:
        self.messages: List[Message] = []
        self.sendable: List[Message] = []
        self.store = store
        self.io = threading.Lock()
        self.diverged = False
        self.last_usage = Usage()  # of the last reply: what compaction looks at
        # The store's version after this Agent's last read/write (None: the store was empty).
        self.version: Any = _UNREAD

    # -- memory (callers that race hold the query's lock) --------------------------------
    def keep(self, message: Message) -> None:
        self.messages.append(message)
        self.sendable.append(sendable(message))

    def keep_all(self, messages: List[Message]) -> None:
        self.messages = list(messages)
        self.sendable = [sendable(m) for m in self.messages]

    def snapshot(self) -> List[Message]:
        return copy.deepcopy(self.messages)

    # -- the store -----------------------------------------------------------------------
    def save(self, method: str, *args: Any) -> Any:
        """Call ``store.<method>(*args)`` under ``io`` and the failure policy."""
        if self.store is None:
            return None
        with self.io:
            return self._call(method, *args)

    def _call(self, method: str, *args: Any) -> Any:
        store = self.store
        if store is None:
            return None
        fail = bool(getattr(store, "fail_on_error", False))
        try:
            written = False
            if self.diverged and method != "load":
                store.replace(list(self.messages))
                self.diverged = False
                # save_later's message is kept before it is saved: the replace wrote it
                written = method == "append" and any(m is args[0] for m in self.messages[-1:])
            # A load may run without the session lock (get_history between queries): read
            # the version first, so a write landing between the two reads makes it stale.
            before = read_version(store) if method == "load" and self.versioned else None
            out = None if written else getattr(store, method)(*args)
            if self.versioned:
                self.version = before if method == "load" else read_version(store)
            return out
        except Exception as exc:
            if fail:
                raise HistoryStoreError(f"history store {method} failed: {exc}") from exc
            log.warning("history store %r: %s failed (%s: %s); continuing with the "
                        "in-memory history only", store, method, type(exc).__name__, exc)
            self.store = None  # nothing more goes to a store that failed once
            return None

    def append(self, message: Message) -> None:
        """Save, then keep (outside a query's race)."""
        self.save("append", message)
        self.keep(message)

    def replace(self, messages: List[Message]) -> None:
        self.save("replace", list(messages))
        self.keep_all(messages)

    def save_later(self, method: str, *args: Any) -> None:
        """A store write that must not hold up the caller (the repair after an abort): done
        now if the store is free, else in a background thread behind the write in flight."""
        if self.store is None:
            return
        if self.io.acquire(blocking=False):
            try:
                self._call(method, *args)  # fail_on_error: raised once the query has ended
            finally:
                self.io.release()
            return
        self.diverged = True  # the next store operation rewrites the store from memory

    def load(self) -> Optional[List[Message]]:
        """What the store holds (None without a store or on a swallowed failure)."""
        loaded = self.save("load")
        return None if loaded is None else list(loaded)

    @property
    def versioned(self) -> bool:
        return callable(getattr(self.store, "version", None))

    def stale(self) -> bool:
        """Whether someone else wrote the store since this Agent last read or wrote it."""
        if not self.versioned or self.version is _UNREAD:
            return False
        return is_stale(self.store, self.version)
