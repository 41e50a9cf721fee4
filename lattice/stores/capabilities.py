"""What a history store can do, declared in one place: typed protocols, read once.

Every store has ``load``, ``append`` and ``replace`` (``HistoryStore``, base.py). Beyond
them a store may offer capabilities, each a protocol here; the built-in stores offer all,
a ``define_history_store`` store those whose callables it was given:

- ``Versioned``: ``version()``, a cheap value that changes with every write (SPEC 14, 21a);
- ``Locks``: ``lock(wait_s=)``, the session lock; its hold carries a fencing ``token``
  and a ``lost`` flag (``Fenced``, SPEC 18);
- ``RecordsRuns``: ``load_run``/``save_run``/``list_runs``, durable runs' records (SPEC 17);
- ``WritesWithRuns``: ``append_and_save_run``, a message and a run record in one write;
- ``SavesCalls``: ``save_calls``/``append_and_save_calls``, a run's call journal written
  by its entries, not by the whole record (the SQLite store: #39).

``Capabilities.of(store)`` answers them all once, when an Agent (or ``follow()``) is given
the store; nothing else in lattice asks a store what it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Tuple, runtime_checkable

__all__ = ["Versioned", "Fenced", "Locks", "RecordsRuns", "WritesWithRuns", "SavesCalls",
           "Capabilities",
           "is_store", "offers"]


@runtime_checkable
class Versioned(Protocol):
    def version(self) -> Any: ...


@runtime_checkable
class Fenced(Protocol):
    """What ``lock()`` gives: a context manager whose hold carries a fencing token."""

    token: Any
    lost: bool

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc_info: Any) -> Any: ...


@runtime_checkable
class Locks(Protocol):
    def lock(self, *, wait_s: float = 0.0) -> Any: ...


@runtime_checkable
class RecordsRuns(Protocol):
    def load_run(self, run_id: str) -> Optional[Dict[str, Any]]: ...

    def save_run(self, record: Dict[str, Any]) -> None: ...

    def list_runs(self, state: Optional[str] = None) -> List[Dict[str, Any]]: ...


@runtime_checkable
class WritesWithRuns(Protocol):
    def append_and_save_run(self, message: Dict[str, Any], record: Dict[str, Any]) -> None: ...


@runtime_checkable
class SavesCalls(Protocol):
    """A run's journal entries (``{call_id: attempt}``) written beside its saved record,
    which ``load_run``/``list_runs`` give back in ``started_calls``; with a message
    appended in the same write (both or neither)."""

    def save_calls(self, run_id: str, calls: Dict[str, int]) -> None: ...

    def append_and_save_calls(self, message: Dict[str, Any], run_id: str,
                              calls: Dict[str, int]) -> None: ...


# Each capability's methods. A method counts when it is there and callable: a
# ``define_history_store`` store declares its run-record slots on its class whether or not
# they were given, which ``isinstance`` against a runtime protocol would take for methods.
_METHODS: Dict[type, Tuple[str, ...]] = {
    Versioned: ("version",), Locks: ("lock",),
    RecordsRuns: ("load_run", "save_run", "list_runs"),
    WritesWithRuns: ("append_and_save_run",),
    SavesCalls: ("save_calls", "append_and_save_calls"),
}


def offers(store: Any, capability: type) -> bool:
    """Whether ``store`` offers ``capability`` (one of the protocols above)."""
    return store is not None and all(
        callable(getattr(store, name, None)) for name in _METHODS[capability])


def is_store(store: Any) -> bool:
    """Whether ``store`` has a history store's three methods."""
    return store is not None and all(
        callable(getattr(store, name, None)) for name in ("load", "append", "replace"))


@dataclass(frozen=True)
class Capabilities:
    """What one store can do (all False for no store)."""

    versioned: bool = False
    locks: bool = False
    records_runs: bool = False
    writes_with_runs: bool = False
    saves_calls: bool = False

    @classmethod
    def of(cls, store: Any) -> Capabilities:
        if store is None:
            return NONE
        return cls(versioned=offers(store, Versioned), locks=offers(store, Locks),
                   records_runs=offers(store, RecordsRuns),
                   writes_with_runs=offers(store, WritesWithRuns),
                   saves_calls=offers(store, SavesCalls))


NONE = Capabilities()  # no store
