"""Where a subagent's conversation is kept (SPEC 22): a store like the parent's (or the
child's own) for a session derived from its session and the call's id, so another process
finds a paused or a durable child again, and ``list_runs(all_sessions=True)`` lists it."""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["derived_store"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def derived_store(store: Any, key: str) -> Any:
    """A store like ``store`` for the session ``f"{its session}/{key}"`` (SQLite and
    PostgreSQL: the same database; JSONL: a file beside it; memory: one kept on the
    store), or None for a store that cannot make one (a custom store)."""
    with_session = getattr(store, "with_session", None)
    session = getattr(store, "session_id", None)
    if callable(with_session) and isinstance(session, str):
        return with_session(f"{session}/{key}")
    from .base import MemoryHistoryStore

    if isinstance(store, MemoryHistoryStore):
        children = store.__dict__.setdefault("_lattice_children", {})
        made = children.get(key)
        if made is None:
            made = children.setdefault(key, MemoryHistoryStore(
                fail_on_error=store.fail_on_error))
        return made
    from .jsonl import JsonlHistoryStore

    if isinstance(store, JsonlHistoryStore):
        stem, ext = os.path.splitext(store.session_id)
        return JsonlHistoryStore(f"{stem}.{_UNSAFE.sub('_', key)}{ext or '.jsonl'}",
                                 fail_on_error=store.fail_on_error)
    return None
