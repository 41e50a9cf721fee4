"""Durable runs (SPEC 17): a query given a ``run_id`` runs at most once to its end, however
often it is called, in whatever processes.

The store is the checkpoint. Beside the messages it keeps a run record (``record.py``):
what was asked, where it entered the history, whether it ended and how, and the call
journal (``started_calls``: which tool calls started, at which attempt). A new call with a
run id is then one of three things, decided by ``plan``: a new run, the replay of an ended
one (``replay``: no request, no lock), or the continuation of one left running (the
history says what finished, the journal what may have happened; ``calls.settle`` decides
each open call).
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

from ..cancellation import AbortSignal
from ..messages import ResultMessage, tool_uses_of
from ..query.endings import Ending
from ..stores.base import describe_store
from ..stores.runs import records_runs
from ..tools.approval import pending_calls
from ..tools.calls import NOT_RUN, resolve_calls, settle
from ..usage import Usage
from .record import (
    Journal,
    Record,
    approval_run_id,
    as_stored,
    decided_refusal,
    ended_record,
    new_record,
    replay,
    run_totals,
    stored_refusal,
    superseded,
    superseded_answers,
)

__all__ = ["check_run_id", "Plan", "plan", "running_runs", "Keeper", "replay",
           "approval_run_id"]

MAX_RUN_ID = 200

def check_run_id(run_id: Any) -> Optional[str]:
    """``run_id`` if valid (None stays None), else ``ValueError`` naming it."""
    if run_id is None:
        return None
    if (not isinstance(run_id, str) or not run_id or len(run_id) > MAX_RUN_ID
            or any(not " " <= ch <= "~" for ch in run_id)):
        raise ValueError(f"run_id must be a non-empty str of at most {MAX_RUN_ID} printable "
                         f"ASCII characters (0x20-0x7E), got {run_id!r}")
    return run_id


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


def running_runs(history: Any) -> List[Record]:
    """The session's runs left ``running`` (none for a store that does not record runs),
    read under the store-failure policy of ``history`` (a ``History``)."""
    if not records_runs(history.home):
        return []
    return list(history.peek("list_runs", "running") or [])


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
            history.append({"role": "user", "content": superseded_answers(record, uses)})
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
        self.journal = Journal(self.record, self._save, self._writing)
        if history.writes_with_runs:
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
        refused = dict(record.get("refused") or {})
        refused.update({k: stored_refusal(v) for k, v in approvals.items() if v is not True})
        record["refused"] = refused
        self.record = record
        self._save(record)
        self.journal = Journal(record, self._save, self._writing)
        return dict(approvals, **self._settled(calls, set(approvals)))

    def resume(self, settings: Any, owner: Any) -> Optional[Dict[str, Any]]:
        """Continue this running run from the store: the prompt appended if it never got
        there, then the last stored reply settled (None: the next step is a request)."""
        record = self.record
        assert record is not None
        self.journal = Journal(record, self._save, self._writing)
        raw = self._raw()
        index = record.get("index")
        index = index if isinstance(index, int) and index >= 0 else len(raw)
        # An approval run's batch answers the paused reply at ``index``, and the prompt
        # given with the decisions (if any) follows the results.
        approving = "approved" in record
        unstored = len(raw) == index + 1 and self.prompt is not None if approving \
            else len(raw) <= index
        if unstored:  # stopped before its prompt was stored
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
            refused = record.get("refused") or {}
            decisions = {c.id: decided_refusal(refused.get(c.id)) for c in calls
                         if c.id not in approved}
        decisions.update(self._settled(calls, set(decisions)))
        return {"reply": tail, "decisions": decisions,
                "prompt": self.prompt if approving else None}

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

    def _writing(self) -> bool:
        return self.history.store is not None  # (None: a lenient store was left behind)
