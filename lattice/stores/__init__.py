"""History stores: where an Agent's conversation is persisted, and how it resumes."""

from .base import HistoryStore, MemoryHistoryStore, call_store, define_history_store
from .jsonl import JsonlHistoryStore, create_jsonl_history_store
from .repair import repair_history
from .sqlite import SqliteHistoryStore

__all__ = [
    "HistoryStore",
    "define_history_store",
    "create_jsonl_history_store",
    "JsonlHistoryStore",
    "SqliteHistoryStore",
    "MemoryHistoryStore",
    "call_store",
    "repair_history",
]
