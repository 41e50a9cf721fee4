"""The call journal (SPEC 17): before a tool handler starts, its run record says so.

The loop talks to a ``Journal`` for every batch and every reply, and never asks whether
the query keeps one: the base class here journals nothing (a query without a run record);
``RunJournal`` is the journal of one run record. Three moments:

- ``ride(calls, lockstep)``: the first call of a reply's batch marked started, to be
  written with the reply where the store writes both at once (one round trip per call
  fewer): its journal entry alone (``append_and_save_calls``) where the store writes
  entries by themselves and holds the record, else the whole record
  (``append_and_save_run``). Only for a batch that starts at
  once: not in lockstep (``query()``: a consumer holding the reply may never let it
  start), not for calls waiting for approval, never for a call that cannot run; a crash
  between the two is answered "unknown" (never run twice), like one in the call;
- ``starting(calls, answered, mark)``: the batch's ``started`` hook: each call that runs
  is marked with its run id and attempt, and journaled before its handler;
- ``compacted(...)``: compaction is about to rewrite the history; the record, saved first,
  keeps what the history will no longer show.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..tools.calls import Outcome, not_run
from ..tools.definition import ToolCall
from ..usage import Usage
from .record import RunRecord

__all__ = ["Journal", "RunJournal", "NO_JOURNAL", "Started", "Ride"]

Started = Callable[[str], Optional[Outcome]]
"""``execute_batch``'s hook, called as each call is about to start: None lets it run; an
``Outcome`` answers it instead."""

Ride = Tuple[Any, ...]
"""What ``ride`` gives the loop: the store method that writes the reply with the journal,
and its arguments after the message."""


class Journal:
    """A query that keeps no run record: nothing is journaled."""

    __slots__ = ()

    def ride(self, calls: Sequence[ToolCall], lockstep: bool) -> Optional[Ride]:
        return None

    def starting(self, calls: List[ToolCall], answered: Dict[str, Any],
                 mark: Started) -> Started:
        return mark

    def compacted(self, before: List[Dict[str, Any]], cut: int, after: List[Dict[str, Any]],
                  summary: Usage) -> None:
        return None


NO_JOURNAL = Journal()


class RunJournal(Journal):
    """The journal of one run record. ``save(record)`` stores a record (raising for a run
    id: SPEC 21b); ``save_calls(run_id, calls)`` stores journal entries alone (None: the
    store cannot, each entry saves the whole record); ``writing()`` is False once a lenient
    store failed (approvals resumed without a run id), after which a call whose start
    cannot be stored does not run. ``rides``: the store writes a message and a record at
    once. ``stored``: the store holds ``record`` (else the first write is the whole one)."""

    __slots__ = ("_base", "_calls", "_at", "_record", "_save", "_save_calls", "_writing",
                 "_rides", "_stored", "_next", "_mutex", "_rode")

    def __init__(self, record: RunRecord, save: Callable[[RunRecord], Any],
                 writing: Callable[[], bool], rides: bool,
                 save_calls: Optional[Callable[[str, Dict[str, int]], Any]] = None,
                 stored: bool = True) -> None:
        self._save = save
        self._save_calls = save_calls
        self._writing = writing
        self._rides = rides
        self._stored = stored
        self._next: Dict[str, int] = {}  # attempts decided by settle (a call run again)
        self._mutex = threading.Lock()  # a parallel batch journals from several threads
        self._rode: Set[str] = set()  # started with their reply's write (``ride``)
        self._set(record)

    def _set(self, record: RunRecord) -> None:
        # A tool turn adds an entry to ``_calls`` (its own dict) and the record is made
        # when asked for: a new record a turn copied the whole journal each time (#39).
        self._base = record
        self._record: Optional[RunRecord] = record
        self._calls = dict(record.started_calls)
        self._at = record.updated_at

    @property
    def record(self) -> RunRecord:
        """The run's record, with every call the journal has started."""
        record = self._record
        if record is None:
            record = self._record = self._base.with_calls(self._calls, self._at)
        return record

    @property
    def run_id(self) -> str:
        return self._base.run_id

    def again(self, call_id: str, attempt: int) -> None:
        """The call runs again as ``attempt`` (an idempotent call a crash left started)."""
        self._next[call_id] = attempt

    def attempt(self, call_id: str) -> int:
        return self._next.get(call_id, 1)

    # -- the loop's three moments -------------------------------------------------------------
    def ride(self, calls: Sequence[ToolCall], lockstep: bool) -> Optional[Ride]:
        if lockstep:
            return None
        first = next((c for c in calls if c.problem is None), None)
        if first is None:
            return None
        by_entry = self._entry_writer() is not None
        if not (by_entry or self._rides):
            return None
        with self._mutex:
            entry = self._mark(first.id)
            self._rode.add(first.id)
            if by_entry:
                return ("append_and_save_calls", self.run_id, entry)
            self._stored = True
            return ("append_and_save_run", self.record.to_dict())

    def starting(self, calls: List[ToolCall], answered: Dict[str, Any],
                 mark: Started) -> Started:
        for call in calls:
            call.in_run(self.run_id, self.attempt(call.id))
        runs = {c.id: c for c in calls if c.problem is None and c.id not in answered}
        return partial(self._started, mark, runs)

    def compacted(self, before: List[Dict[str, Any]], cut: int, after: List[Dict[str, Any]],
                  summary: Usage) -> None:
        """The record, saved before the history is rewritten, follows it (see
        ``RunRecord.compacted``)."""
        with self._mutex:
            record = self.record.compacted(before, cut, after, summary)
            if record is not self.record:
                self._set(record)
                self._save(record)
                self._stored = True

    # -- inside ------------------------------------------------------------------------------
    def _started(self, mark: Started, runs: Dict[str, ToolCall], call_id: str
                 ) -> Optional[Outcome]:
        """Note the call, and journal it if its handler runs. A call of a tool not declared
        idempotent whose start could not be stored (a lenient store failed) does not run:
        after a crash it would run again (SPEC 17: at most once)."""
        mark(call_id)
        call = runs.get(call_id)
        if call is None or self._start(call_id):
            return None
        if call.tool is not None and call.tool.idempotent:
            return None
        return not_run(call_id, "unjournaled"), False

    def _start(self, call_id: str) -> bool:
        """Record that ``call_id`` starts; False if that could not be stored."""
        # Already in the store, with its reply (``ride``): every riding tool turn, so
        # without the lock (``ride`` added it before the batch began; set operations are
        # atomic).
        rode = self._rode
        if call_id in rode:
            rode.discard(call_id)
        else:
            with self._mutex:
                entry = self._mark(call_id)
                writer = self._entry_writer()
                if writer is not None:
                    writer(self.run_id, entry)
                else:
                    self._save(self.record)
                    self._stored = True
        return self._writing()

    def _mark(self, call_id: str) -> Dict[str, int]:
        """The record with ``call_id`` started; its journal entry."""
        attempt = self.attempt(call_id)
        self._calls[call_id] = attempt
        self._at = time.time()
        self._record = None
        return {call_id: attempt}

    def _entry_writer(self) -> Optional[Callable[[str, Dict[str, int]], Any]]:
        """What writes an entry alone, where the store can and holds the record (None:
        the whole record is written)."""
        return self._save_calls if self._stored else None
