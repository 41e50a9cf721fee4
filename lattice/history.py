"""The conversation: the history list, its provider-ready twin, and the store behind it.

``wire`` holds one ``{"role", "content"}`` dict per history entry, made once when the
entry is written, so building a request copies a list of references instead of stripping
SDK keys from the whole history every turn.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

from .messages import wire

__all__ = ["History"]


class History:
    """The messages of one Agent, mirrored into its store (if any)."""

    __slots__ = ("messages", "wire", "store")

    def __init__(self, store: Any = None) -> None:
        self.messages: List[Dict[str, Any]] = []
        self.wire: List[Dict[str, Any]] = []
        self.store = store

    def append(self, message: Dict[str, Any]) -> None:
        self.messages.append(message)
        self.wire.append(wire(message))
        if self.store is not None:
            from .stores import call_store

            call_store(self.store, "append", message)

    def replace(self, messages: List[Dict[str, Any]], *, to_store: bool = True) -> None:
        self.messages = list(messages)
        self.wire = [wire(m) for m in self.messages]
        if to_store and self.store is not None:
            from .stores import call_store

            call_store(self.store, "replace", list(self.messages))

    def snapshot(self) -> List[Dict[str, Any]]:
        return copy.deepcopy(self.messages)

    def load(self) -> Optional[List[Dict[str, Any]]]:
        """What the store holds (None on a swallowed store error)."""
        from .stores import call_store

        loaded = call_store(self.store, "load")
        return None if loaded is None else list(loaded)
