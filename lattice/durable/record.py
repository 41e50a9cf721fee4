"""A durable run's record and its call journal (SPEC 17), as the store keeps them.

The record (``stores/runs.py`` stores it): what was asked (``prompt``), where it entered
the history (``index``), ``running`` or ``ended`` (with the result, for a replay), what a
compaction summarised away, and for a run that resumes approvals the decisions. Inside it,
the call journal (``started_calls``: which tool calls started, at which attempt), written
through ``Journal``. ``runs.py`` decides what a call with a run id does with them.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .. import errors
from ..messages import ResultMessage, tool_uses_of
from ..query.endings import KINDS
from ..tools.approval import refusal
from ..tools.calls import not_run
from ..tools.definition import ToolResult, result_content
from ..usage import Usage

__all__ = ["as_stored", "new_record", "ended_record", "replay", "totals", "run_totals",
           "superseded", "superseded_answers", "stored_refusal", "decided_refusal",
           "approval_run_id", "Journal", "SUPERSEDED_WHY", "Record"]

SUPERSEDED_WHY = "another query of this conversation started after the run stopped"

Record = Dict[str, Any]


def as_stored(value: Any) -> Any:
    """``value`` as a store gives it back (a JSON round trip): what prompts are compared as."""
    return json.loads(json.dumps(value))


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
    subtype = data.get("subtype")
    result = ResultMessage(
        subtype if subtype in KINDS else "success",
        is_error=bool(data.get("is_error")),
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


def run_totals(record: Record, messages: List[Dict[str, Any]]) -> Tuple[int, Usage]:
    """A run's replies and usage so far: those stored after its prompt, and those a
    compaction summarised away (kept in the record)."""
    index = record.get("index")
    turns, usage = totals(messages, index if isinstance(index, int) and index >= 0
                          else len(messages))
    return (turns + int(record.get("compacted_turns") or 0),
            usage + Usage.from_dict(record.get("compacted_usage")))


def superseded(record: Record, messages: List[Dict[str, Any]]) -> Record:
    """``record`` ended ``interrupted``, because another query took the conversation over
    (SPEC 21a): what a later call with its id replays."""
    turns, usage = run_totals(record, messages)
    return ended_record(record, ResultMessage("interrupted", usage=usage, num_turns=turns))


def superseded_answers(record: Record, uses: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The results for the open calls of a run another query takes over: a started call is
    unknown, one a person refused gets that refusal, any other did not run."""
    started = record.get("started_calls") or {}
    refused = record.get("refused") or {}
    blocks = []
    for use in uses:
        call_id = use["id"]
        if call_id in started:
            blocks.append(not_run(call_id, "uncertain"))
        elif call_id in refused:  # a person's decision stands
            blocks.append(refusal(call_id, decided_refusal(refused[call_id]))[0])
        else:
            blocks.append(not_run(call_id, "ended", why=SUPERSEDED_WHY))
    return blocks


def stored_refusal(decision: Any) -> Any:
    """A refusal as the run record keeps it (JSON): False, its text, or a ``ToolResult``'s
    content and flags, so a run resumed after a crash answers the call as decided."""
    if isinstance(decision, ToolResult):
        content, is_error, end_turn = result_content(decision)
        return {"content": content, "is_error": is_error, "end_turn": end_turn}
    return decision if isinstance(decision, str) else False


def decided_refusal(stored: Any) -> Any:
    """The decision ``stored_refusal`` kept (False when none was kept)."""
    if isinstance(stored, dict):
        return ToolResult(stored.get("content"), is_error=bool(stored.get("is_error")),
                          end_turn=bool(stored.get("end_turn")))
    return stored if isinstance(stored, str) else False


def approval_run_id(tail: Dict[str, Any]) -> str:
    """The run record approvals use when resumed without a run id: one per paused reply."""
    uses = tool_uses_of(tail.get("content"))
    first = uses[0].get("id") if uses else ""
    return f"approval:{first}"


class Journal:
    """The call journal of one run: ``start(call_id)`` records, before a handler runs, that
    the call started (at its attempt) and saves the record through ``save``.

    ``ride(call_id)`` records it earlier, in the record the caller writes together with the
    reply that asks for the call (a store with ``append_and_save_run``: one round trip fewer
    per call); ``start`` then writes nothing. Only for a call whose batch starts at once: a
    crash between the two is answered "unknown" (never run twice), like one in the call.
    """

    def __init__(self, record: Record, save: Callable[[Record], Any],
                 writing: Callable[[], bool] = lambda: True) -> None:
        self.record = record
        self.run_id: str = record["run_id"]
        self._save = save
        self._writing = writing  # False once a lenient store failed: nothing is stored
        self._next: Dict[str, int] = {}  # attempts decided by settle (a call run again)
        self._mutex = threading.Lock()  # a parallel batch journals from several threads
        self._rode: Set[str] = set()  # started with their reply's write (``ride``)

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

    def compacted(self, before: List[Dict[str, Any]], cut: int,
                  after: List[Dict[str, Any]], summary: Usage) -> None:
        """Compaction is about to replace ``before`` with ``after`` (its first ``cut``
        messages summarised): the record, saved first, says where the run's prompt now is
        (0: summarised too), and keeps what ``totals`` can no longer read from the
        history: the replies summarised away, and the summary call's usage."""
        record = self.record
        index = record.get("index")
        if not isinstance(index, int) or index < 0:
            return
        turns, usage = totals(before[:cut], index)
        with self._mutex:
            record["index"] = len(after) - (len(before) - index) if index >= cut else 0
            record["compacted_turns"] = int(record.get("compacted_turns") or 0) + turns
            record["compacted_usage"] = (Usage.from_dict(record.get("compacted_usage"))
                                         + usage + summary).to_dict()
            record["updated_at"] = time.time()
            self._save(record)

    def ride(self, call_id: str) -> Record:
        """The record with ``call_id`` started, to be written with its reply."""
        with self._mutex:
            self._mark(call_id)
            self._rode.add(call_id)
            return self.record

    def start(self, call_id: str) -> bool:
        """Record that ``call_id`` starts; False if that could not be stored (a lenient
        store failed, now or earlier in the query): after a crash it would look unstarted."""
        with self._mutex:
            if call_id in self._rode:  # already in the store, with its reply
                self._rode.discard(call_id)
            else:
                self._mark(call_id)
                self._save(self.record)
            return self._writing()

    def _mark(self, call_id: str) -> None:
        self.started[call_id] = self.attempt(call_id)
        self.record["updated_at"] = time.time()
