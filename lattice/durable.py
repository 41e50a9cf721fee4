"""Durable runs (SPEC 17): a query given a ``run_id`` runs at most once to its end, however
often it is called, in whatever processes.

The store is the checkpoint. Beside the messages it keeps a run record (``stores/runs.py``):
what was asked, where it entered the history, whether it ended and how, and the call
journal (``started_calls``: which tool calls started, at which attempt). A new call with a
run id is then one of three things, decided by ``plan``: a new run, the replay of an ended
one (``replay``: no request, no lock), or the continuation of one left running (the
history says what finished, the journal what may have happened; ``calls.settle`` decides
each open call).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import errors
from .messages import ResultMessage, tool_uses_of
from .stores.base import describe_store
from .stores.runs import records_runs
from .usage import Usage

__all__ = ["check_run_id", "as_stored", "Plan", "plan", "new_record", "ended_record",
           "replay", "totals", "Journal", "approval_run_id", "running_runs", "superseded",
           "SUPERSEDED_WHY"]

SUPERSEDED_WHY = "another query of this conversation started after the run stopped"

MAX_RUN_ID = 200
Record = Dict[str, Any]


def check_run_id(run_id: Any) -> Optional[str]:
    """``run_id`` if valid (None stays None), else ``ValueError`` naming it."""
    if run_id is None:
        return None
    if (not isinstance(run_id, str) or not run_id or len(run_id) > MAX_RUN_ID
            or any(not " " <= ch <= "~" for ch in run_id)):
        raise ValueError(f"run_id must be a non-empty str of at most {MAX_RUN_ID} printable "
                         f"ASCII characters (0x20-0x7E), got {run_id!r}")
    return run_id


def as_stored(value: Any) -> Any:
    """``value`` as a store gives it back (a JSON round trip): what prompts are compared as."""
    return json.loads(json.dumps(value))


class Plan(NamedTuple):
    kind: str  # "new", "replay" or "resume"
    record: Optional[Record]


def plan(store: Any, run_id: str, prompt: Any) -> Plan:
    """What a call with ``run_id`` does, from the store's record of it.

    Raises:
        ValueError: the store does not record runs, or the run was started with another
            prompt.
    """
    if not records_runs(store):
        raise ValueError(f"run_id needs a history store that records runs (the built-in "
                         f"stores, or define_history_store(load_run=, save_run=, "
                         f"list_runs=)); got {describe_store(store)}")
    record = store.load_run(run_id)
    if record is None:
        return Plan("new", None)
    if prompt is not None and as_stored(prompt) != record.get("prompt"):
        raise ValueError(f"run {run_id!r} was started with another prompt; a run id names "
                         "one prompt")
    return Plan("replay" if record.get("state") == "ended" else "resume", record)


def new_record(run_id: str, prompt: Any, index: int) -> Record:
    """The record of a run about to start: its prompt goes at ``index`` of the history."""
    now = time.time()
    return {"run_id": run_id, "state": "running", "prompt": as_stored(prompt),
            "index": index, "started_at": now, "updated_at": now, "started_calls": {}}


def ended_record(record: Record, result: ResultMessage) -> Record:
    """``record`` once its run ended with ``result`` (kept in ``to_dict`` form, with what a
    replay needs besides: the error's class and message, the pending call ids)."""
    ended = dict(record, state="ended", result=result.to_dict())
    error = result.error
    ended["result"]["error_type"] = type(error).__name__ if error is not None else None
    ended["result"]["error_message"] = str(error) if error is not None else None
    ended["result"]["pending_approval_ids"] = [c.id for c in result.pending_approvals]
    return ended


def replay(record: Record, output: Any, pending: Callable[[List[str]], List[Any]]
           ) -> ResultMessage:
    """The recorded ``ResultMessage`` again, ``replayed=True``. ``output`` is the query's
    ``OutputSchema`` (None without one): the structured result is rebuilt through it;
    ``pending(ids)`` gives the ``ToolCall``s of recorded pending approvals."""
    data = record.get("result") or {}
    structured = data.get("structured_result")
    parse = getattr(output, "parse", None)
    if structured is not None and callable(parse):
        try:
            structured = parse(structured)
        except Exception:  # noqa: BLE001 - the schema changed since: give the JSON back
            pass
    result = ResultMessage(
        str(data.get("subtype", "success")), is_error=bool(data.get("is_error")),
        result=data.get("result"), structured_result=structured,
        usage=Usage.from_dict(data.get("usage")), stop_reason=data.get("stop_reason"),
        num_turns=int(data.get("num_turns") or 0), duration_ms=int(data.get("duration_ms") or 0),
        error=_error(data))
    ids = data.get("pending_approval_ids")
    if isinstance(ids, list) and ids:
        result.pending_approvals = pending([i for i in ids if isinstance(i, str)])
    result.run_id = record.get("run_id")
    result.replayed = True
    return result


def _error(data: Dict[str, Any]) -> Optional[BaseException]:
    name, message = data.get("error_type"), data.get("error_message")
    if not isinstance(name, str):
        return None
    cls = getattr(errors, name, None)
    text = message if isinstance(message, str) else ""
    if isinstance(cls, type) and issubclass(cls, errors.LatticeError):
        try:
            return cls(text)
        except Exception:  # noqa: BLE001 - a class wanting other arguments
            pass
    return errors.LatticeError(f"{name}: {text}" if text else name)


def totals(messages: List[Dict[str, Any]], index: int) -> Tuple[int, Usage]:
    """The model replies stored for a run whose prompt is at ``index``: how many, and their
    usage (each stored assistant message keeps its own)."""
    turns, usage = 0, Usage()
    for message in messages[index + 1:]:
        if message.get("role") == "assistant":
            turns += 1
            usage += Usage.from_dict(message.get("usage"))
    return turns, usage


def running_runs(store: Any) -> List[Record]:
    """The session's runs left ``running`` (none for a store that does not record runs)."""
    if not records_runs(store):
        return []
    return list(store.list_runs(state="running"))


def superseded(record: Record, messages: List[Dict[str, Any]],
               answers: Optional[Dict[str, Any]]) -> Record:
    """``record`` ended ``interrupted``, because another query took the conversation over
    (SPEC 21a); ``answers`` is the message that answered its open calls (None if none)."""
    index = record.get("index")
    turns, usage = totals(messages, index if isinstance(index, int) else len(messages))
    result = ResultMessage("interrupted", result=None, usage=usage, num_turns=turns)
    ended = ended_record(record, result)
    if answers is not None:
        ended["result"]["result"] = None
    return ended


def approval_run_id(tail: Dict[str, Any]) -> str:
    """The run record approvals use when resumed without a run id: one per paused reply."""
    uses = tool_uses_of(tail.get("content"))
    first = uses[0].get("id") if uses else ""
    return f"approval:{first}"


class Journal:
    """The call journal of one run: ``start(call_id)`` records, before a handler runs, that
    the call started (at its attempt) and saves the record through ``save``."""

    def __init__(self, record: Record, save: Callable[[Record], Any]) -> None:
        self.record = record
        self.run_id: str = record["run_id"]
        self._save = save
        self._next: Dict[str, int] = {}  # attempts decided by settle (a call run again)

    @property
    def started(self) -> Dict[str, int]:
        calls = self.record.setdefault("started_calls", {})
        assert isinstance(calls, dict)
        return calls

    def again(self, call_id: str, attempt: int) -> None:
        """The call runs again as ``attempt`` (an idempotent call a crash left started)."""
        self._next[call_id] = attempt

    def attempt(self, call_id: str) -> int:
        return self._next.get(call_id, 1)

    def start(self, call_id: str) -> None:
        self.started[call_id] = self.attempt(call_id)
        self.record["updated_at"] = time.time()
        self._save(self.record)
