"""A durable run's record (SPEC 17), typed: ``RunRecord``, built and read here only.

The store keeps it as a JSON-ready dict beside the messages (``to_dict``; stores never look
inside but for ``run_id``, ``state``, ``started_at``): what was asked (``prompt``), where
it entered the history (``index``), ``running`` or ``ended`` (with the ``result`` and the
``end_index`` where the run's messages stop), the call journal (``started_calls``: which
tool calls started, at which attempt; written through ``journal.py``), what a compaction
summarised away, and for a run that resumes approvals the decisions.

``format`` says which version of this shape a record has: ``FORMAT`` is written; a record
without the key was written by 0.3 and loads as format 0 (the same keys). A record that is
not a dict, lacks ``state`` or ``prompt``, names an unknown state, or ended without a
result is damaged: ``from_dict`` raises ``DamagedRecord`` and the caller reports it as a
``HistoryStoreError`` naming the run and the store, never as a new run or a made-up replay
(SPEC 21b). Keys this version does not know are kept and written back (``extra``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .. import errors
from ..cancellation import AbortSignal
from ..messages import ResultMessage, tool_uses_of
from ..query.endings import RESULT_SUBTYPES
from ..tools.approval import refusal
from ..tools.calls import not_run
from ..tools.definition import ToolCall, ToolResult, result_content
from ..usage import Usage

__all__ = ["RunRecord", "FORMAT", "STATES", "DamagedRecord", "as_stored", "totals",
           "superseded_answers", "stored_refusal", "decided_refusal", "approval_run_id",
           "stored_decision", "read_decision",
           "SUPERSEDED_WHY"]

FORMAT = 1
"""The record format this version writes (0: a 0.3 record, which has no ``format`` key)."""

STATES = ("running", "ended")

SUPERSEDED_WHY = "another query of this conversation started after the run stopped"
_NO_USAGE = Usage()  # what ``to_dict`` compares with (never changed)

_KNOWN = ("run_id", "state", "prompt", "index", "started_at", "updated_at", "started_calls",
          "session_id", "result", "end_index", "compacted_turns", "compacted_usage",
          "approved", "refused", "compacting", "format")


class DamagedRecord(ValueError):
    """A stored run record that cannot be read as one (``from_dict``'s reason)."""


def as_stored(value: Any) -> Any:
    """``value`` as a store gives it back (a JSON round trip): what prompts are compared as."""
    return json.loads(json.dumps(value))


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One durable run as its store keeps it. Immutable: each change is a new record
    (``dataclasses.replace``), saved whole by the store's ``save_run`` upsert."""

    run_id: str
    prompt: Any
    index: Optional[int]  # where the prompt went in the history (None: unknown)
    state: str = "running"
    started_at: float = 0.0
    updated_at: float = 0.0
    started_calls: Mapping[str, int] = dataclasses.field(default_factory=dict)
    session_id: Any = None
    result: Optional[Mapping[str, Any]] = None  # ended: ResultMessage.to_dict() and more
    end_index: Optional[int] = None  # ended: where the run's messages stop (follow)
    compacted_turns: int = 0  # replies a compaction summarised away
    compacted_usage: Usage = dataclasses.field(default_factory=Usage)
    approved: Optional[Tuple[str, ...]] = None  # an approval run: the approved call ids
    refused: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # The last compaction's undo: the values above before it, and the first message of the
    # history it wrote. A crash between saving this record and rewriting the history leaves
    # the old history: ``checked_against`` then takes the old values back.
    compacting: Optional[Mapping[str, Any]] = None
    format: int = FORMAT
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    # -- made ------------------------------------------------------------------------------
    @classmethod
    def new(cls, run_id: str, prompt: Any, index: int) -> RunRecord:
        """The record of a run about to start: its prompt goes at ``index`` of the history."""
        now = time.time()
        return cls(run_id, as_stored(prompt), index, started_at=now, updated_at=now)

    def ended(self, result: ResultMessage, end_index: int) -> RunRecord:
        """This run ended with ``result``; its messages stop at ``end_index``."""
        data = result.to_dict()
        data["usage"] = result.usage.to_dict(by_model=True)  # a replay's split too
        error = result.error
        data["error_type"] = type(error).__name__ if error is not None else None
        data["error_message"] = str(error) if error is not None else None
        data["pending_approval_ids"] = [c.id for c in result.pending_approvals]  # 0.3 readers
        data["pending_approvals"] = [{"id": c.id, "name": c.name, "input": as_stored(c.input),
                                      "path": c.path} for c in result.pending_approvals]
        if result.pending_elicitations:  # awaiting_input (SPEC 23)
            data["pending_elicitations"] = [r.to_dict() for r in result.pending_elicitations]
        return self._but(state="ended", result=data, end_index=end_index,
                         updated_at=time.time())

    def with_calls(self, calls: Mapping[str, int], at: float) -> RunRecord:
        """This record with the call journal ``calls`` (copied), updated at ``at``."""
        return self._but(started_calls=dict(calls), updated_at=at)

    def _but(self, **changes: Any) -> RunRecord:
        """``dataclasses.replace`` for the changes of every run (its end, its journal),
        without its walk over the fields and ``__init__``: a copy of the instance dict."""
        assert changes.keys() <= self.__dataclass_fields__.keys(), changes
        new = object.__new__(RunRecord)
        new.__dict__.update(self.__dict__, **changes)
        return new

    def superseded(self, messages: List[Dict[str, Any]]) -> RunRecord:
        """Ended ``interrupted``: another query took the conversation over (SPEC 21a); what
        a later call with its id replays. Its messages stop where the history is now."""
        turns, usage = self.totals(messages)
        return self.ended(ResultMessage("interrupted", usage=usage, num_turns=turns),
                          len(messages))

    def compacted(self, before: List[Dict[str, Any]], cut: int,
                  after: List[Dict[str, Any]], summary: Usage) -> RunRecord:
        """Compaction is about to replace ``before`` with ``after`` (its first ``cut``
        messages summarised): where the run's prompt now is (0: summarised too), and what
        ``totals`` can no longer read from the history (the replies summarised away, the
        summary call's usage), with the undo for a crash before the rewrite."""
        index = self.index
        if index is None:
            return self
        turns, usage = totals(before[:cut], index)
        return dataclasses.replace(
            self, index=len(after) - (len(before) - index) if index >= cut else 0,
            compacted_turns=self.compacted_turns + turns,
            compacted_usage=self.compacted_usage + usage + summary,
            compacting={"first": fingerprint(after[0]) if after else None, "index": index,
                        "compacted_turns": self.compacted_turns,
                        "compacted_usage": self.compacted_usage.to_dict()},
            updated_at=time.time())

    def checked_against(self, messages: List[Dict[str, Any]]) -> RunRecord:
        """This record as the stored history ``messages`` shows it: if its last compaction
        never rewrote the history (a crash in between), the values from before it."""
        undo = self.compacting
        if undo is None:
            return self
        if messages and fingerprint(messages[0]) == undo.get("first"):
            return dataclasses.replace(self, compacting=None)
        return dataclasses.replace(
            self, index=_int(undo.get("index")), compacting=None,
            compacted_turns=_int(undo.get("compacted_turns")) or 0,
            compacted_usage=Usage.from_dict(undo.get("compacted_usage")))

    # -- read ------------------------------------------------------------------------------
    @property
    def is_ended(self) -> bool:
        return self.state == "ended"

    def totals(self, messages: List[Dict[str, Any]], model: Optional[str] = None
               ) -> Tuple[int, Usage]:
        """The run's replies and usage so far: those stored after its prompt, and those a
        compaction summarised away (split by model: a reply that names none is ``model``'s)."""
        index = self.index if self.index is not None else len(messages)
        turns, usage = totals(messages, index, model)
        return turns + self.compacted_turns, usage + self.compacted_usage

    def replay(self, output: Any, tools: Mapping[str, Any],
               pending: Callable[[List[str]], List[ToolCall]]) -> ResultMessage:
        """The recorded ``ResultMessage`` again, ``replayed=True`` (SPEC 17). ``output`` is
        the query's ``OutputSchema`` (None without one): the structured result is rebuilt
        through it. Pending approvals are the calls as recorded (ids, names, inputs; their
        tool found in ``tools``); a 0.3 record kept only their ids: ``pending(ids)`` finds
        them in the history."""
        data = self.result
        assert data is not None  # from_dict refuses an ended record without one
        structured = data.get("structured_result")
        parse = getattr(output, "parse", None)
        if structured is not None and callable(parse):
            try:
                structured = parse(structured)
            except Exception:  # noqa: BLE001 - the schema changed since: give the JSON back
                pass
        calls = data.get("pending_approvals")
        waiting: List[ToolCall] = []
        if isinstance(calls, list):
            waiting = [_recorded_call(c, tools) for c in calls
                       if isinstance(c, dict) and isinstance(c.get("id"), str)]
        else:
            ids = data.get("pending_approval_ids")
            if isinstance(ids, list) and ids:
                waiting = pending([i for i in ids if isinstance(i, str)])
        return ResultMessage(
            data["subtype"], is_error=bool(data.get("is_error")),
            result=data.get("result"), structured_result=structured,
            usage=Usage.from_dict(data.get("usage")), stop_reason=data.get("stop_reason"),
            num_turns=int(data.get("num_turns") or 0),
            duration_ms=int(data.get("duration_ms") or 0), error=_error(data),
            pending_approvals=waiting, run_id=self.run_id, replayed=True,
            pending_elicitations=_recorded_requests(data))._as_recorded(data)

    # -- the store's form --------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """The JSON-ready dict a store keeps (0.3's keys, plus ``format``)."""
        out: Dict[str, Any] = dict(self.extra)
        out.update({"run_id": self.run_id, "state": self.state, "prompt": self.prompt,
                    "index": self.index, "started_at": self.started_at,
                    "updated_at": self.updated_at, "started_calls": dict(self.started_calls),
                    "format": self.format})
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.result is not None:
            out["result"] = dict(self.result)
        if self.end_index is not None:
            out["end_index"] = self.end_index
        if self.compacted_turns or self.compacted_usage != _NO_USAGE:
            out["compacted_turns"] = self.compacted_turns
            out["compacted_usage"] = self.compacted_usage.to_dict(by_model=True)
        if self.approved is not None:
            out["approved"] = list(self.approved)
        if self.refused:
            out["refused"] = dict(self.refused)
        if self.compacting is not None:
            out["compacting"] = dict(self.compacting)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> RunRecord:
        """The record a store gave back (a 0.3 record, without ``format``, included).

        Raises:
            DamagedRecord: not a dict, no ``state`` or ``prompt``, an unknown state, an
                ended record without a result (never made up: SPEC 21b).
        """
        if not isinstance(data, dict):
            raise DamagedRecord(f"it is not a record (a {type(data).__name__})")
        run_id = data.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise DamagedRecord(f"its run_id is {run_id!r}")
        for key in ("state", "prompt"):
            if key not in data:
                raise DamagedRecord(f"it has no {key!r}")
        state = data["state"]
        if state not in STATES:
            raise DamagedRecord(f"its state {state!r} is not one of {', '.join(STATES)}")
        result = data.get("result")
        if state == "ended":
            if not isinstance(result, dict):
                raise DamagedRecord("it ended without a result")
            if result.get("subtype") not in RESULT_SUBTYPES:
                raise DamagedRecord(f"its result has an unknown subtype "
                                    f"{result.get('subtype')!r}")
        started = data.get("started_calls")
        approved = data.get("approved")
        refused = data.get("refused")
        version = data.get("format", 0)
        compacting = data.get("compacting")
        return cls(
            run_id, data["prompt"], _int(data.get("index")), state=state,
            started_at=_float(data.get("started_at")),
            updated_at=_float(data.get("updated_at")),
            started_calls={k: v for k, v in started.items() if isinstance(v, int)}
            if isinstance(started, dict) else {},
            session_id=data.get("session_id"), result=result,
            end_index=_int(data.get("end_index")),
            compacted_turns=_int(data.get("compacted_turns")) or 0,
            compacted_usage=Usage.from_dict(data.get("compacted_usage")),
            approved=tuple(i for i in approved if isinstance(i, str))
            if isinstance(approved, list) else None,
            refused=dict(refused) if isinstance(refused, dict) else {},
            compacting=dict(compacting) if isinstance(compacting, dict) else None,
            format=version if isinstance(version, int) else 0,
            extra={k: v for k, v in data.items() if k not in _KNOWN})


def fingerprint(message: Any) -> str:
    """A short digest of a message as a store gives it back."""
    text = json.dumps(message, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:24]


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _error(data: Mapping[str, Any]) -> Optional[BaseException]:
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


def totals(messages: List[Dict[str, Any]], index: int, model: Optional[str] = None
           ) -> Tuple[int, Usage]:
    """The model replies stored for a run whose prompt is at ``index``: how many, and their
    usage (each stored assistant message keeps its own, split by the model it names, else
    ``model``; the results of a batch that ran subagents keep theirs, SPEC 22)."""
    turns, usage = 0, Usage()
    for message in messages[index + 1:]:
        if message.get("role") == "assistant":
            turns += 1
            usage += Usage.from_dict(message.get("usage")).of_model(
                message.get("model") or model)
        if "subagent_usage" in message:
            usage += Usage.from_dict(message.get("subagent_usage"))
    return turns, usage


def _recorded_call(item: Mapping[str, Any], tools: Mapping[str, Any]) -> ToolCall:
    """A pending call as an ended record keeps it: its own tool found in ``tools``, a
    subagent's (its ``path`` is longer) without one."""
    path = item.get("path")
    path = [str(p) for p in path] if isinstance(path, list) and path else [item["id"]]
    name = str(item.get("name", ""))
    call = ToolCall(item["id"], name, item.get("input"),
                    tools.get(name) if len(path) == 1 else None, AbortSignal(), None)
    call.path = path
    return call


def superseded_answers(record: RunRecord, uses: List[Dict[str, Any]]
                       ) -> List[Dict[str, Any]]:
    """The results for the open calls of a run another query takes over: a started call is
    unknown, one a person refused gets that refusal, any other did not run."""
    blocks = []
    for use in uses:
        call_id = use["id"]
        if call_id in record.started_calls:
            blocks.append(not_run(call_id, "uncertain"))
        elif call_id in record.refused:  # a person's decision stands
            blocks.append(refusal(call_id, decided_refusal(record.refused[call_id]))[0])
        else:
            blocks.append(not_run(call_id, "ended", why=SUPERSEDED_WHY))
    return blocks


def stored_decision(decision: Any) -> Any:
    """Any decision as a record keeps it: True, or ``stored_refusal``'s form."""
    return True if decision is True else stored_refusal(decision)


def read_decision(stored: Any) -> Any:
    """``stored_decision`` read back."""
    return True if stored is True else decided_refusal(stored)


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


def _recorded_requests(data: Mapping[str, Any]) -> List[Any]:
    """An awaiting_input result's questions, as recorded (``ElicitationRequest``s)."""
    stored = data.get("pending_elicitations")
    if not isinstance(stored, list) or not stored:
        return []
    from ..mcp._client import ElicitationRequest

    return [ElicitationRequest.from_dict(r) for r in stored if isinstance(r, dict)]
