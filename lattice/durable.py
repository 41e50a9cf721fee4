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
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from . import errors
from .approval import pending_calls
from .calls import NOT_RUN, not_run, resolve_calls, settle
from .cancellation import AbortSignal
from .endings import KINDS, Ending
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


def plan(history: Any, run_id: str, prompt: Any) -> Plan:
    """What a call with ``run_id`` does, from the store's record of it (read under the
    store-failure policy of ``history``, a ``History``).

    Raises:
        ValueError: the store does not record runs, or the run was started with another
            prompt.
    """
    store = history.home
    if not records_runs(store):
        raise ValueError(f"run_id needs a history store that records runs (the built-in "
                         f"stores, or define_history_store(load_run=, save_run=, "
                         f"list_runs=)); got {describe_store(store)}")
    record = history.peek("load_run", run_id)
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


def running_runs(history: Any) -> List[Record]:
    """The session's runs left ``running`` (none for a store that does not record runs),
    read under the store-failure policy of ``history`` (a ``History``)."""
    if not records_runs(history.home):
        return []
    return list(history.peek("list_runs", "running") or [])


def superseded(record: Record, messages: List[Dict[str, Any]]) -> Record:
    """``record`` ended ``interrupted``, because another query took the conversation over
    (SPEC 21a): what a later call with its id replays."""
    turns, usage = run_totals(record, messages)
    return ended_record(record, ResultMessage("interrupted", usage=usage, num_turns=turns))


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

    def __init__(self, record: Record, save: Callable[[Record], Any]) -> None:
        self.record = record
        self.run_id: str = record["run_id"]
        self._save = save
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
            self.started[call_id] = self.attempt(call_id)
            self.record["updated_at"] = time.time()
            self._rode.add(call_id)
            return self.record

    def start(self, call_id: str) -> None:
        with self._mutex:
            if call_id in self._rode:  # already in the store, with its reply
                self._rode.discard(call_id)
                return
            self.started[call_id] = self.attempt(call_id)
            self.record["updated_at"] = time.time()
            self._save(self.record)


class Keeper:
    """One query's part in durable runs, on a store that records runs (SPEC 17, 21a).

    Made when the query is called (``plan``: a bad run id or another prompt fail there).
    Under the session lock, ``under_lock`` reads the run again, closes any other run the
    session left running (``supersede``), and says whether the run had ended meanwhile.
    Then the query begins as a new run (``start``, before the prompt enters the history),
    continues one (``resume``), or runs approvals (``approve``); ``journal`` is handed to
    the loop; ``end`` records the result.
    """

    def __init__(self, history: Any, run_id: Optional[str], prompt: Any) -> None:
        self.history = history
        self.run_id = run_id
        self.prompt = prompt
        self.plan = plan(history, run_id, prompt) if run_id is not None else None
        self.record: Optional[Record] = self.plan.record if self.plan is not None else None
        self.journal: Optional[Journal] = None
        self.turns = 0
        self.usage = Usage()

    # -- under the session lock -------------------------------------------------------------
    def under_lock(self, own: Optional[str]) -> Optional[Record]:
        """Read run ``own`` again (None: this query has no record yet) and supersede every
        other running run. Returns ``own``'s record if it has ended (to replay)."""
        history = self.history
        if own is not None:
            self.record = history.peek("load_run", own)
            if self.record is not None and self.record.get("state") == "ended":
                return self.record
        elif history.no_running_runs_at == history.loads:
            return None  # none was left running, and nobody else wrote since we looked
        for other in running_runs(history):
            if other.get("run_id") != own:
                self.supersede(other)
        history.no_running_runs_at = None if own is not None else history.loads
        return None

    def supersede(self, record: Record) -> None:
        """Close a run another query takes the conversation from: its open calls answered
        without running anything (never started: not run; started: unknown), and its
        record ended ``interrupted``."""
        history = self.history
        raw = self._raw()
        started = record.get("started_calls") or {}
        tail = raw[-1] if raw else None
        uses = [u for u in tool_uses_of(tail.get("content")) if isinstance(u.get("id"), str)
                ] if tail is not None and tail.get("role") == "assistant" else []
        waiting = tail is not None and tail.get("pending_approval") and not started
        if uses and not waiting:  # (a paused reply none of whose calls ran: section 12's)
            history.append({"role": "user", "content": [
                not_run(u["id"], "uncertain") if u["id"] in started
                else not_run(u["id"], "ended", why=SUPERSEDED_WHY) for u in uses]})
        history.save("save_run", superseded(record, history.messages))

    def _raw(self) -> List[Dict[str, Any]]:
        """The stored history as it is, not repaired (memory follows it)."""
        loaded = self.history.load()
        if loaded is not None:
            self.history.keep_all(loaded)
        return list(self.history.messages)

    # -- beginning ----------------------------------------------------------------------------
    def start(self, message: Dict[str, Any]) -> None:
        """A new run: its record, then its prompt ``message`` at the end of the history
        (in one write, where the store can)."""
        assert self.run_id is not None
        history = self.history
        self.record = new_record(self.run_id, self.prompt, len(history.messages))
        self.journal = Journal(self.record, self._save)
        if callable(getattr(history.store, "append_and_save_run", None)):
            history.save("append_and_save_run", message, self.record)
            history.keep(message)
        else:
            self._save(self.record)
            history.append(message)

    def approve(self, tail: Dict[str, Any], approvals: Dict[str, Any],
                calls: List[Any]) -> Dict[str, Any]:
        """Approvals resumed: the run record that journals them (this run's, or one of
        their own), and the decisions for the batch, calls a crash left started settled
        by the journal."""
        rid = self.run_id or approval_run_id(tail)
        record = self.record or new_record(rid, self.prompt, len(self.history.messages))
        record["approved"] = sorted(set(record.get("approved") or []) |
                                    {k for k, v in approvals.items() if v is True})
        self.record = record
        self._save(record)
        self.journal = Journal(record, self._save)
        return dict(approvals, **self._settled(calls, set(approvals)))

    def resume(self, settings: Any, owner: Any) -> Optional[Dict[str, Any]]:
        """Continue this running run from the store: the prompt appended if it never got
        there, then the last stored reply settled (None: the next step is a request)."""
        record = self.record
        assert record is not None
        self.journal = Journal(record, self._save)
        raw = self._raw()
        index = record.get("index")
        index = index if isinstance(index, int) and index >= 0 else len(raw)
        if len(raw) <= index:  # stopped before its prompt was stored
            self.history.append({"role": "user", "content": self.prompt})
            return None
        self.turns, self.usage = run_totals(record, raw)
        tail = raw[-1]
        uses = tool_uses_of(tail.get("content")) if tail.get("role") == "assistant" else []
        if tail.get("role") != "assistant":
            return None
        if not uses:
            return {"reply": tail, "final": True}
        if tail.get("pending_approval") and not record.get("approved"):
            return {"ending": Ending("awaiting_approval",
                                     pending=pending_calls(raw, settings, owner))}
        calls = resolve_calls(uses, settings.tools, AbortSignal(), owner)
        approved = record.get("approved")
        decisions: Dict[str, Any] = {}
        if tail.get("pending_approval") and isinstance(approved, list):
            decisions = {c.id: False for c in calls if c.id not in approved}
        decisions.update(self._settled(calls, set(decisions)))
        return {"reply": tail, "decisions": decisions, "prompt": None}

    def _settled(self, calls: List[Any], decided: Any) -> Dict[str, Any]:
        """Decisions for calls the journal knows started: run again, or the unknown text."""
        assert self.journal is not None
        out: Dict[str, Any] = {}
        for call in calls:
            if call.id in decided:
                continue
            kind, attempt = settle(call, self.journal.started)
            if kind == "again":
                self.journal.again(call.id, attempt)
            elif kind == "uncertain":
                out[call.id] = NOT_RUN["uncertain"]
        return out

    # -- the end ---------------------------------------------------------------------------
    def end(self, result: ResultMessage) -> None:
        """The query ended with ``result``: its run (if any) is recorded as ended."""
        if self.record is None:
            return
        result.run_id = self.run_id
        ended = ended_record(self.record, result)
        ended["end_index"] = len(self.history.messages)  # where follow(run_id=) stops
        self._save(ended)
        self.history.settle_version()
        self.history.no_running_runs_at = self.history.loads  # the others were closed first

    def _save(self, record: Record) -> None:
        self.history.save("save_run", record)
