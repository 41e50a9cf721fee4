"""History stores: where an Agent's conversation is persisted, and how it resumes."""

from .base import HistoryStore, MemoryHistoryStore, call_store, define_history_store
from .jsonl import JsonlHistoryStore, create_jsonl_history_store
from .postgres import PostgresHistoryStore
from .repair import repair_history
from .session import SessionHold, hold_session, is_stale, read_version
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
    "call_store",
    "repair_history",
    "is_message",
    "hold_session",
    "SessionHold",
    "read_version",
    "is_stale",
]
