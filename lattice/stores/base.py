"""The history-store protocol, and stores built from callables or kept in memory.

A store only raises ordinary exceptions (``OSError``, ``sqlite3.Error``, ``TypeError`` for
a message that is not JSON-serialisable, ...). Whether a failure stops the conversation is
decided in one place for every store: ``lattice/conversation/store_link.py`` (``fail_on_error``).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Union, runtime_checkable

from . import runs
from .locks import MemorySessionLock, check_wait
from .shape import keep_messages

__all__ = [
    "HistoryStore",
    "define_history_store",
    "MemoryHistoryStore",
    "describe_store",
    "encode_message",
    "resolve_path",
    "Message",
    "PathArg",
]

logger = logging.getLogger("lattice")

Message = Dict[str, Any]
"""One history entry: ``{"role": "user"|"assistant", "content": ...}``."""

PathArg = Union[str, "os.PathLike[str]"]


@runtime_checkable
class HistoryStore(Protocol):
    """Where an Agent's history is persisted.

    ``load`` runs once per Agent, before its first query; every message entering the
    history is passed to ``append``; compaction and ``replace_history`` call ``replace``.
    With ``fail_on_error`` False (the default) a failing store is logged and the
    conversation continues in memory; True makes the failure raise ``HistoryStoreError``.
    ``load`` returns only values shaped like messages (``shape.is_message``); anything else
    stored is skipped with a warning.

    Two optional capabilities, offered by every built-in store but not required:

    ``lock(*, wait_s=0.0)``
        A context manager that holds the session for one query, across threads, processes
        and (for a database server) hosts. Raises ``ConcurrentQueryError`` when another
        holder keeps it past ``wait_s`` seconds, ``ValueError`` for a bad ``wait_s``, and the
        store's own errors (``OSError``, ...) when the store cannot be reached. Leaving the
        block releases it, on any exit; a holder that dies frees it within a few seconds.
        Writes are not refused to non-holders: the lock is a guard between cooperating
        Agents, not a permission.
    ``version()``
        A cheap, opaque, comparable value that changes whenever anyone writes the session
        (``append``, ``replace``, a delete), read from the store itself (not a cache), so a
        value seen after this process's last write that differs from the current one means
        another writer has been there. ``None`` while nothing is stored.

    The hold ``lock`` returns carries ``token``, a fencing token greater than that of every
    earlier hold of the session, and ``lost``, set once the store knows another holder took
    the session over. While held, the store's writes (``append``, ``replace``,
    ``save_run``) carry the token, and a store that can be outlived (a lease that expires, a
    lock that dies with a connection) refuses a write whose token is older than the
    session's newest with ``LockLostError`` (SPEC 18).

    Durable runs add three more (``runs.py``): ``load_run``, ``save_run``, ``list_runs``.

    ``lattice.conversation.store_link`` uses them, and puts every store call, these
    included, under one failure policy.
    """

    fail_on_error: bool

    def load(self) -> List[Message]:  # pragma: no cover - protocol
        ...

    def append(self, message: Message) -> None:  # pragma: no cover - protocol
        ...

    def replace(self, messages: List[Message]) -> None:  # pragma: no cover - protocol
        ...


def describe_store(store: Any) -> str:
    """The store's repr (naming its file and session; never a password), kept short."""
    try:
        text = repr(store)
    except Exception:  # a host's store with a broken __repr__ must not hide the real error
        text = f"<{type(store).__name__}>"
    return text if len(text) <= 300 else text[:297] + "..."


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_COMPACT_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def encode_message(message: Message) -> bytes:
    """``message`` as compact UTF-8 JSON, for the stores that serialise.

    Raises:
        TypeError: ``message`` is not a dict, or holds something JSON cannot encode.
    """
    if not isinstance(message, dict):
        raise TypeError(f"a history message must be a dict, got {type(message).__name__}")
    try:
        return _COMPACT.encode(message).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (e.g. from undecodable tool output) has no UTF-8 form; its
        # \uXXXX escape does, and loads back as the same string.
        return _COMPACT_ASCII.encode(message).encode("ascii")


def resolve_path(path: PathArg) -> str:
    """``path`` as an absolute ``str`` with ``~`` expanded (no I/O).

    Absolute at construction, so a later ``chdir`` in the host does not move the history.
    """
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raise TypeError(f"path must be a str or os.PathLike[str], got {raw!r}")
    if not raw.strip():  # abspath('') would be the working directory
        raise ValueError(f"path must name a file, got {raw!r}")
    return os.path.abspath(os.path.expanduser(raw))


def check_flag(name: str, value: Any) -> bool:
    """``value`` of the bool option ``name``, or ``ValueError`` naming it: options are
    checked, not truthy (SPEC 21b), so ``fail_on_error='no'`` is not taken as True."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool (True or False), got {value!r}")
    return value


# -- a store from callables ----------------------------------------------------------


class _CallableHistoryStore:
    """What ``define_history_store`` returns: optional callables and a flag. The run-record
    methods exist only when their callables were given (``runs.records_runs``)."""

    __slots__ = ("_load", "_append", "_replace", "fail_on_error", "load_run", "save_run",
                 "list_runs")

    def __init__(
        self,
        load: Optional[Callable[[], Optional[Iterable[Message]]]],
        append: Optional[Callable[[Message], Any]],
        replace: Optional[Callable[[List[Message]], Any]],
        fail_on_error: bool,
        runs: Dict[str, Optional[Callable[..., Any]]],
    ) -> None:
        self._load = load
        self._append = append
        self._replace = replace
        self.fail_on_error = fail_on_error
        for name, fn in runs.items():
            if fn is not None:
                setattr(self, name, fn)

    def load(self) -> List[Message]:
        if self._load is None:
            return []
        loaded = self._load()
        # A callable returning None means "nothing stored yet", like a missing file.
        return [] if loaded is None else keep_messages(list(loaded), repr(self))

    def append(self, message: Message) -> None:
        if self._append is not None:
            self._append(message)

    def replace(self, messages: List[Message]) -> None:
        if self._replace is not None:
            self._replace(messages)

    def __repr__(self) -> str:
        names = [n for n in ("load", "append", "replace") if getattr(self, "_" + n) is not None]
        names += [n for n in _RUN_METHODS if hasattr(self, n)]
        return f"<history store ({', '.join(names) or 'no callables'})>"


_RUN_METHODS = ("load_run", "save_run", "list_runs")


def define_history_store(
    load: Optional[Callable[[], Optional[Iterable[Message]]]] = None,
    append: Optional[Callable[[Message], Any]] = None,
    replace: Optional[Callable[[List[Message]], Any]] = None,
    *,
    fail_on_error: bool = False,
    load_run: Optional[Callable[[str], Optional[Dict[str, Any]]]] = None,
    save_run: Optional[Callable[[Dict[str, Any]], Any]] = None,
    list_runs: Optional[Callable[..., List[Dict[str, Any]]]] = None,
) -> HistoryStore:
    """Build a store from plain callables.

    A missing ``load`` loads nothing (``[]``); a missing ``append`` or ``replace`` does
    nothing. The callables receive the Agent's own dicts: copy them if you keep them.

    Durable runs (``run_id=``, SPEC 17) need all three of ``load_run(run_id) -> dict |
    None``, ``save_run(record)`` (an upsert by ``record["run_id"]``; the record holds the
    call journal too) and ``list_runs(state=None) -> list[dict]``; without them the store
    does not record runs.

    Raises:
        ValueError: an argument that is neither None nor callable (named in the message),
            or only some of the three run-record callables.
    """
    runs = {"load_run": load_run, "save_run": save_run, "list_runs": list_runs}
    for name, fn in (("load", load), ("append", append), ("replace", replace), *runs.items()):
        if fn is not None and not callable(fn):
            raise ValueError(f"define_history_store: {name} must be callable or None, got {fn!r}")
    given = [name for name, fn in runs.items() if fn is not None]
    if given and len(given) != len(runs):
        missing = [name for name in runs if name not in given]
        raise ValueError(f"define_history_store: load_run, save_run and list_runs go "
                         f"together; {', '.join(given)} given without {', '.join(missing)}")
    return _CallableHistoryStore(load, append, replace,
                                 check_flag("fail_on_error", fail_on_error), runs)


# -- in memory ----------------------------------------------------------------------


class MemoryHistoryStore:
    """Keeps the history in this process: for tests, and to share a history between Agents.

    Every message is deep-copied on the way in and out, so later changes to the Agent's
    dicts (or to what ``load`` returned) never alter what is stored. ``messages`` is the
    stored list itself, for inspection; ``runs`` the run records by run id. ``lock``
    excludes other holders in this process (a ``threading.Lock`` cannot be outlived, so its
    fencing token is never stale); ``version`` counts the writes made through the store,
    run records included.
    """

    def __init__(
        self, messages: Optional[Iterable[Message]] = None, *, fail_on_error: bool = False
    ) -> None:
        self.fail_on_error = check_flag("fail_on_error", fail_on_error)
        self.messages: List[Message] = copy.deepcopy(list(messages or []))
        self.runs: Dict[str, Dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._session = threading.Lock()
        self._writes = 0
        self._tokens = 0

    def load(self) -> List[Message]:
        with self._lock:
            loaded = copy.deepcopy(self.messages)
        return keep_messages(loaded, "MemoryHistoryStore", unit="message")

    def append(self, message: Message) -> None:
        stored = copy.deepcopy(message)
        with self._lock:
            self.messages.append(stored)
            self._writes += 1

    def replace(self, messages: List[Message]) -> None:
        stored = copy.deepcopy(list(messages))
        with self._lock:
            self.messages[:] = stored  # same list object, so a held reference stays live
            self._writes += 1

    # -- run records (SPEC 17) --------------------------------------------------------------
    def load_run(self, run_id: str) -> Optional[Dict[str, Any]]:
        """The run's record, or None."""
        with self._lock:
            found = self.runs.get(run_id)
            return copy.deepcopy(found) if found is not None else None

    def save_run(self, record: Dict[str, Any]) -> None:
        """Insert or update the record of ``record["run_id"]``."""
        stored = runs.stamp(record, None, deep=True)  # one session: it has no id
        runs.encode_record(stored)  # what a file or database store would refuse, refused
        with self._lock:
            self.runs[stored["run_id"]] = stored
            self._writes += 1

    def list_runs(self, state: Optional[str] = None) -> List[Dict[str, Any]]:
        """The run records (of ``state``, if given), oldest first."""
        runs.check_state(state)
        with self._lock:
            return runs.select(copy.deepcopy(list(self.runs.values())), state)

    # -- the session ------------------------------------------------------------------------
    def lock(self, *, wait_s: float = 0.0) -> MemorySessionLock:
        """Hold this store's session for one query (see ``HistoryStore``)."""
        return MemorySessionLock(self._session, check_wait(wait_s), repr(self), self._token)

    def _token(self) -> int:
        with self._lock:
            self._tokens += 1
            return self._tokens

    def version(self) -> int:
        """How many writes went through this store (changes with each)."""
        return self._writes

    def __repr__(self) -> str:
        return f"MemoryHistoryStore(<{len(self.messages)} messages>)"
