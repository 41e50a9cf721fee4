"""Run records: what a store keeps about a durable run beside its messages (SPEC 17).

A run record is a JSON-serialisable dict: at least ``run_id``, ``session_id``, ``state``
(``"running"`` or ``"ended"``), ``started_at`` and ``updated_at`` (wall-clock seconds), the
``prompt`` and the ``index`` in the history where it went, ``started_calls`` (the call
journal: ``{tool_use_id: attempt}``) and, once ended, the ``result``. A store that records
runs offers three optional methods, never touching the message list:

``load_run(run_id) -> dict | None``
    The run's latest record (None if the store has none).
``save_run(record)``
    An upsert by ``record["run_id"]``. The store sets ``session_id`` (its own session) and
    ``updated_at``; a write made under the session lock is fenced like a message.
``list_runs(state=None) -> list[dict]``
    The session's records (of one state, if given), oldest first.

The helpers here are what every built-in store applies the same way.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any, Dict, Iterable, List, Optional

from ..errors import LockLostError

__all__ = ["RUN_KEY", "STATES", "Record", "stamp", "encode_record", "decode_record",
           "record_line", "latest",
           "check_state", "select", "records_runs", "lock_lost"]

Record = Dict[str, Any]

RUN_KEY = "lattice_run"
"""The key of a JSONL line holding a run record (``{"lattice_run": {...}}``): not a
message, so a reader that knows nothing of runs skips it."""

STATES = ("running", "ended")

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def stamp(record: Any, session_id: Any, *, deep: bool = False) -> Record:
    """A copy of ``record`` ready to store: ``session_id`` set, ``updated_at`` now,
    ``started_at`` and ``started_calls`` filled in if missing. Shallow (a store that
    encodes it at once), or ``deep`` (one that keeps the object).

    Raises:
        TypeError: ``record`` is not a dict, or its ``run_id`` is not a non-empty str.
    """
    if not isinstance(record, dict):
        raise TypeError(f"a run record must be a dict, got {type(record).__name__}")
    run_id = record.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise TypeError(f"a run record needs a non-empty str run_id, got {run_id!r}")
    out = copy.deepcopy(record) if deep else dict(record)
    now = time.time()
    out["session_id"] = session_id
    out["updated_at"] = now
    out.setdefault("started_at", now)
    out.setdefault("state", "running")
    out.setdefault("started_calls", {})
    return out


_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def encode_record(record: Record) -> str:
    """``record`` as compact JSON text (TypeError for what JSON cannot hold); a lone
    surrogate (from undecodable tool output) is kept as its ``\\uXXXX`` escape."""
    text = _COMPACT.encode(record)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _ASCII.encode(record)
    return text


def record_line(record: Record) -> bytes:
    """``record`` as one JSONL line (``{"lattice_run": {...}}``, newline included)."""
    return (encode_record({RUN_KEY: record}) + "\n").encode("utf-8")


def latest(values: Iterable[Any]) -> Dict[str, Record]:
    """Each run id's last record among parsed ``{"lattice_run": record}`` lines, in the
    order of their last save."""
    found: Dict[str, Record] = {}
    for value in values:
        record = value.get(RUN_KEY) if isinstance(value, dict) else None
        if isinstance(record, dict) and isinstance(record.get("run_id"), str):
            found.pop(record["run_id"], None)
            found[record["run_id"]] = record
    return found


def decode_record(text: Any, run_id: Optional[str] = None) -> Optional[Record]:
    """The record stored as ``text``, None if it does not parse as one (a listing skips
    it). Given the ``run_id`` it was stored under, a record that does not parse is a
    ``ValueError`` naming the run: a damaged record is an error, never a new run (SPEC
    21b)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("run_id"), str):
        return value
    if run_id is not None:
        raise ValueError(f"the run record of {run_id!r} does not parse as a record")
    return None


def check_state(state: Any) -> Optional[str]:
    """``list_runs``'s ``state`` filter: None, or a str (ValueError naming it)."""
    if state is not None and not isinstance(state, str):
        raise ValueError(f"state must be None or a str such as 'running' or 'ended', "
                         f"got {state!r}")
    return state


def select(records: Iterable[Record], state: Optional[str]) -> List[Record]:
    """The records of ``state`` (all when None), oldest start first."""
    chosen = [r for r in records if state is None or r.get("state") == state]
    chosen.sort(key=lambda r: (_number(r.get("started_at")), str(r.get("run_id"))))
    return chosen


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def records_runs(store: Any) -> bool:
    """Whether ``store`` records runs (``load_run``, ``save_run`` and ``list_runs``): the
    ``RecordsRuns`` capability (``capabilities.py``, where every capability is declared)."""
    from .capabilities import RecordsRuns, offers

    return offers(store, RecordsRuns)


def lock_lost(what: str) -> LockLostError:
    """The error for a write refused because another holder took the session over."""
    return LockLostError(
        f"{what}: the session lock was lost (another holder took the session over while "
        "this query was paused or cut off from the store); this query writes nothing more")
