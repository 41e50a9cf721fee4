"""History stores: where an Agent's conversation is persisted, and how it resumes.

The public store API. What the Agent does with a store (the failure policy, the session
lock, staleness) is in ``lattice/conversation/store_link.py`` and ``session.py``.

The file and database stores (JSONL, SQLite, PostgreSQL) are imported on first use
(``__getattr__``): ``import lattice`` does not pay for them (issue 28).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .base import HistoryStore, MemoryHistoryStore, define_history_store
from .repair import repair_history
from .shape import is_message

if TYPE_CHECKING:  # pragma: no cover - loaded by __getattr__ at run time
    from .jsonl import JsonlHistoryStore, create_jsonl_history_store
    from .postgres import PostgresHistoryStore
    from .sqlite import SqliteHistoryStore

# public name -> the module (in this package) that defines it, imported when first asked for
LAZY = {
    "JsonlHistoryStore": "jsonl",
    "create_jsonl_history_store": "jsonl",
    "SqliteHistoryStore": "sqlite",
    "PostgresHistoryStore": "postgres",
}

__all__ = [
    "HistoryStore",
    "define_history_store",
    "create_jsonl_history_store",
    "JsonlHistoryStore",
    "SqliteHistoryStore",
    "PostgresHistoryStore",
    "MemoryHistoryStore",
    "repair_history",
    "is_message",
]


def __getattr__(name: str) -> Any:
    module = LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lattice.stores' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain one
    return value
