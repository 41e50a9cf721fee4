"""History stores: where an Agent's conversation is persisted, and how it resumes.

The public store API. What the Agent does with a store (the failure policy, the session
lock, staleness) is in ``lattice/history.py`` and ``session.py``.
"""

from .base import HistoryStore, MemoryHistoryStore, define_history_store
from .jsonl import JsonlHistoryStore, create_jsonl_history_store
from .postgres import PostgresHistoryStore
from .repair import repair_history
from .shape import is_message
from .sqlite import SqliteHistoryStore

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
