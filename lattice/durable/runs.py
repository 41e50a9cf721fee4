"""Where a run is recorded and resumed (SPEC 17, 21a, 21b): a query's ``DurableRun``.

A query given a ``run_id`` runs at most once to its end, however often it is called, in
whatever processes. The store is the checkpoint: beside the messages it keeps a run record
(``record.py``). A call with a run id is one of three things, decided when the query is
made: a new run, the replay of an ended one (no request, no lock), or the continuation of
one left running (the history says what finished, the journal what may have happened;
``tools/calls.settle`` decides each open call).

Every query has a ``DurableRun``, so ``Query`` and ``Loop`` never ask whether it keeps a
record: the base class does nothing (a store that does not record runs, or no store);
``RecordedRun`` is a query's part on a store that records runs, with or without a run id
(without one it still closes runs another query left running, and journals approvals).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from ..cancellation import AbortSignal
from ..conversation.store_link import StoreLink
from ..errors import HistoryStoreError
from ..messages import ResultMessage, tool_uses_of
from ..query.endings import Ending
from ..stores.base import describe_store
from ..tools.approval import pending_calls
from ..tools.calls import NOT_RUN, resolve_calls, settle
from ..tools.definition import ToolCall
from ..usage import Usage
from .journal import NO_JOURNAL, Journal, RunJournal
from .record import (
    DamagedRecord,
    RunRecord,
    approval_run_id,
    as_stored,
    decided_refusal,
    read_decision,
    stored_decision,
    stored_refusal,
    superseded_answers,
)

__all__ = ["check_run_id", "DurableRun", "RecordedRun", "durable_run", "running_runs",
           "read_record", "approval_run_id", "MAX_RUN_ID"]

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


def read_record(data: Any, run_id: str, store: Any) -> Optional[RunRecord]:
    """The record a store gave back for ``run_id`` (None: none), typed; a damaged one is a
    ``HistoryStoreError`` naming the run and the store (SPEC 21b: never a new run, never a
    replay made up)."""
    if data is None:
        return None
    try:
        return RunRecord.from_dict(data)
    except DamagedRecord as exc:
        raise HistoryStoreError(f"the run record of {run_id!r} is damaged: {exc} (store: "
                                f"{describe_store(store)}); it is neither run again nor "
                                "replayed") from None


def running_runs(link: StoreLink) -> List[RunRecord]:
    """The session's runs left ``running`` (none for a store that does not record runs),
    read under the store-failure policy of ``link``; damaged records are left out (they
    are reported when their run id is called)."""
    if not link.caps.records_runs:
        return []
    found = []
    for data in link.peek("list_runs", "running") or []:
        try:
            found.append(RunRecord.from_dict(data))
        except DamagedRecord:
            continue
    return found


class DurableRun:
    """A query's part in durable runs, when it keeps no run record: nothing to do. The
    prompt goes into the history as it is; the result is the query's own."""

    run_id: Optional[str] = None
    journal: Journal = NO_JOURNAL
    turns = 0  # replies of the run stored before this query (a resumed run's)
    usage = Usage()

    def __init__(self, link: StoreLink) -> None:
        self.link = link  # the store, under its failure policy
        self.history = link.history  # the messages

    def replay(self) -> Optional[RunRecord]:
        """The ended run to replay without a lock (None: the query runs)."""
        return None

    def under_lock(self, approving: Optional[Dict[str, Any]]) -> Optional[RunRecord]:
        """Once the session is held: the run's record read again (returned if the run ended
        meanwhile), other runs left running superseded (SPEC 21a). ``approving``: the
        paused reply when the query resumes approvals."""
        return None

    @property
    def resumes(self) -> bool:
        """The query continues a run left running (its prompt is in the store)."""
        return False

    def start(self, message: Dict[str, Any]) -> None:
        """The query's prompt ``message`` enters the history."""
        self.link.append(message)

    def resume(self, settings: Any, owner: Any) -> Optional[Dict[str, Any]]:
        raise AssertionError("only a RecordedRun resumes")  # pragma: no cover

    def approve(self, tail: Dict[str, Any], approvals: Dict[str, Any],
                calls: List[ToolCall], children: Optional[Dict[str, Any]] = None
                ) -> Dict[str, Any]:
        """The decisions for a batch resumed with ``approvals`` (``children``: those of
        waiting subagents, which only a recorded run keeps)."""
        return dict(approvals)

    def end(self, result: ResultMessage) -> None:
        """The query ended with ``result``."""
        return None


class RecordedRun(DurableRun):
    """A query's part in durable runs on a store that records runs (SPEC 17, 21a).

    Made when the query is called (a bad run id or another prompt fail there). Under the
    session lock, ``under_lock`` reads the run again, closes any other run the session left
    running, and says whether the run had ended meanwhile. Then the query begins as a new
    run (``start``, before the prompt enters the history), continues one (``resume``), or
    runs approvals (``approve``); ``journal`` is handed to the loop; ``end`` records the
    result. With a run id every record, journal and lock write is strict (SPEC 21b: a
    store failure raises ``HistoryStoreError``, whatever ``fail_on_error`` says).
    """

    def __init__(self, link: StoreLink, run_id: Optional[str], prompt: Any) -> None:
        super().__init__(link)
        self.run_id = run_id
        self.prompt = prompt
        self.strict = run_id is not None
        self.record: Optional[RunRecord] = None
        self._loads = link.loads  # the record below was read after this many loads
        if run_id is not None:
            self.record = self._load(run_id)
            if self.record is not None and prompt is not None and \
                    as_stored(prompt) != self.record.prompt:
                raise ValueError(f"run {run_id!r} was started with another prompt; a run id "
                                 "names one prompt")

    def _load(self, run_id: str) -> Optional[RunRecord]:
        data = self.link.peek("load_run", run_id, strict=self.strict)
        return read_record(data, run_id, self.link.home)

    def replay(self) -> Optional[RunRecord]:
        record = self.record
        return record if record is not None and record.is_ended else None

    @property
    def resumes(self) -> bool:
        return self.record is not None

    # -- under the session lock -------------------------------------------------------------
    def under_lock(self, approving: Optional[Dict[str, Any]]) -> Optional[RunRecord]:
        link = self.link
        own = self.run_id
        if own is None and approving is not None:
            own = approval_run_id(approving)  # approvals journal in a record of their own
        unchanged = link.unchanged_since(self._loads)  # nobody wrote since we read
        if own is not None and (own != self.run_id or not unchanged):
            self.record = self._load(own)
            if self.record is not None and self.record.is_ended:
                return self.record
        if not (unchanged and link.no_running_runs_at == link.loads):
            for other in running_runs(link):
                if other.run_id != own:
                    self.supersede(other)
        link.runs_closed(own is None)
        return None

    def supersede(self, record: RunRecord) -> None:
        """Close a run another query takes the conversation from: its open calls answered
        without running anything (never started: not run; started: unknown), and its
        record ended ``interrupted``, its messages stopping where the history is now."""
        history, link = self.history, self.link
        raw = self._raw()
        record = record.checked_against(raw)
        tail = raw[-1] if raw else None
        uses = [u for u in tool_uses_of(tail.get("content")) if isinstance(u.get("id"), str)
                ] if tail is not None and tail.get("role") == "assistant" else []
        waiting = tail is not None and tail.get("pending_approval") and not record.started_calls
        if uses and not waiting:  # (a paused reply none of whose calls ran: section 12's)
            link.append({"role": "user", "content": superseded_answers(record, uses)})
        link.save("save_run", record.superseded(history.messages).to_dict())

    def _raw(self) -> List[Dict[str, Any]]:
        """The stored history as it is, not repaired (memory follows it)."""
        loaded = self.link.load()
        if loaded is not None:
            self.link.keep_all(loaded)
        return list(self.history.messages)

    # -- beginning ----------------------------------------------------------------------------
    def start(self, message: Dict[str, Any]) -> None:
        """A new run: its record, then its prompt ``message`` at the end of the history (in
        one write, where the store can). Without a run id: the prompt only."""
        if self.run_id is None:
            self.link.append(message)
            return
        history, link = self.history, self.link
        record = self.record = RunRecord.new(self.run_id, self.prompt, len(history.messages))
        self.journal = self._journal(record)
        if link.caps.writes_with_runs:
            link.save("append_and_save_run", message, record.to_dict(), strict=True)
            history.keep(message)
        else:
            self._save(record)
            link.append(message)

    def approve(self, tail: Dict[str, Any], approvals: Dict[str, Any],
                calls: List[ToolCall], children: Optional[Dict[str, Any]] = None
                ) -> Dict[str, Any]:
        """Approvals resumed: the run record that journals them (this run's, or one of
        their own), and the decisions for the batch, calls a crash left started settled by
        the journal. ``children``: the decisions for waiting subagents (SPEC 22), kept in
        the record for a resume after a crash."""
        rid = self.run_id or approval_run_id(tail)
        record = self.record or RunRecord.new(rid, self.prompt, len(self.history.messages))
        refused = dict(record.refused)
        refused.update({k: stored_refusal(v) for k, v in approvals.items() if v is not True})
        approved = set(record.approved or ()) | {k for k, v in approvals.items() if v is True}
        extra = dict(record.extra)
        if children:
            extra["child_decisions"] = {cid: {k: stored_decision(v) for k, v in d.items()}
                                        for cid, d in children.items()}
        record = self.record = dataclasses.replace(record, approved=tuple(sorted(approved)),
                                                   refused=refused, extra=extra)
        self._save(record)
        journal = self.journal = self._journal(record)
        return dict(approvals, **self._settled(journal, calls, set(approvals)))

    def resume(self, settings: Any, owner: Any) -> Optional[Dict[str, Any]]:
        """Continue this running run from the store: the prompt appended if it never got
        there, then the last stored reply settled (None: the next step is a request)."""
        raw = self._raw()
        loaded = self.record
        assert loaded is not None
        record = self.record = loaded.checked_against(raw)
        journal = self.journal = self._journal(record, stored=record is loaded)
        index = record.index if record.index is not None else len(raw)
        # An approval run's batch answers the paused reply at ``index``, and the prompt
        # given with the decisions (if any) follows the results.
        approving = record.approved is not None
        unstored = len(raw) == index + 1 and self.prompt is not None if approving \
            else len(raw) <= index
        if unstored:  # stopped before its prompt was stored
            self.link.append({"role": "user", "content": self.prompt})
            return None
        self.turns, self.usage = record.totals(raw, settings.model)
        tail = raw[-1]
        if tail.get("role") != "assistant":
            return None
        uses = tool_uses_of(tail.get("content"))
        if not uses:
            return {"reply": tail, "final": True}
        if tail.get("pending_input") and not record.approved:  # MCP questions (SPEC 23)
            from ..mcp._pending import pending_requests

            return {"ending": Ending("awaiting_input", elicitations=pending_requests(tail))}
        if tail.get("pending_approval") and not record.approved:
            return {"ending": Ending("awaiting_approval",
                                     pending=pending_calls(raw, settings, owner))}
        calls = resolve_calls(uses, settings.tools, AbortSignal(), owner)
        decisions: Dict[str, Any] = {}
        if tail.get("pending_approval") and record.approved is not None:
            decisions = {c.id: decided_refusal(record.refused.get(c.id)) for c in calls
                         if c.id not in record.approved}
        decisions.update(self._settled(journal, calls, set(decisions)))
        children = record.extra.get("child_decisions")
        return {"reply": tail, "decisions": decisions,
                "prompt": self.prompt if approving else None,
                "children": {cid: {k: read_decision(v) for k, v in d.items()}
                             for cid, d in children.items() if isinstance(d, dict)}
                if isinstance(children, dict) else {}}

    @staticmethod
    def _settled(journal: RunJournal, calls: List[ToolCall], decided: Any
                 ) -> Dict[str, Any]:
        """Decisions for calls the journal knows started: run again, or the unknown text."""
        out: Dict[str, Any] = {}
        for call in calls:
            if call.id in decided:
                continue
            verdict, attempt = settle(call, journal.record.started_calls)
            if verdict == "again":
                journal.again(call.id, attempt)
            elif verdict == "uncertain":
                out[call.id] = NOT_RUN["uncertain"]
        return out

    def _journal(self, record: RunRecord, stored: bool = True) -> RunJournal:
        """The journal of ``record`` (``stored``: as the store holds it)."""
        caps = self.link.caps
        return RunJournal(record, self._save, self._writing, caps.writes_with_runs,
                          self._save_calls if caps.saves_calls else None, stored)

    # -- the end ---------------------------------------------------------------------------
    def end(self, result: ResultMessage) -> None:
        """The query ended with ``result``: its run (if any) is recorded as ended, with the
        index where its messages stop (``follow(run_id=)`` stops there)."""
        journal = self.journal
        record = journal.record if isinstance(journal, RunJournal) else self.record
        if record is None:
            return
        self._save(record.ended(result, len(self.history.messages)))
        self.link.settle_version()
        self.link.runs_closed(True)  # the others were closed first

    def _save(self, record: RunRecord) -> None:
        self.link.save("save_run", record.to_dict(), strict=self.strict)

    def _save_calls(self, run_id: str, calls: Dict[str, int]) -> None:
        self.link.save("save_calls", run_id, calls, strict=self.strict)

    def _writing(self) -> bool:
        return self.link.store is not None  # (None: a lenient store was left behind)


def durable_run(link: StoreLink, run_id: Optional[str], prompt: Any) -> DurableRun:
    """The ``DurableRun`` of a query on ``link``'s store.

    Raises:
        ValueError: a run id on a store that does not record runs, or a run started with
            another prompt.
        HistoryStoreError: the run's record is damaged, or could not be read.
    """
    if link.caps.records_runs:
        return RecordedRun(link, run_id, prompt)
    if run_id is not None:
        raise ValueError(f"run_id needs a history store that records runs (the built-in "
                         f"stores, or define_history_store(load_run=, save_run=, "
                         f"list_runs=)); got {describe_store(link.home)}")
    return DurableRun(link)

