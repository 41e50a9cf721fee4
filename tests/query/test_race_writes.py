"""QueryRun's store-write / session-lock hand-off (lattice/query/race.py), driven directly.

The four fields under test: ``writing`` (a store write is in flight), ``_after_write``
(what runs once it lands: the session lock's release), ``_request_done`` (the request's
deadline timer and signal link, undone once) and ``_unlink`` (the caller's signal let go).
A gated store write is a ``save`` callable that waits for a gate, as a slow database would.
"""

from __future__ import annotations

import threading

import pytest
from helpers import LONG

import lattice.query.race as race
from lattice import AbortController, AbortError
from lattice.query.endings import Ending
from lattice.query.race import Phase, QueryRace, Stopped


class GatedSave:
    """A store write that waits for ``gate`` (and then fails, if told to)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.entered, self.gate, self.done = threading.Event(), threading.Event(), False
        self.error = error

    def __call__(self) -> None:
        self.entered.set()
        assert self.gate.wait(LONG)
        self.done = True
        if self.error is not None:
            raise self.error


def commit_in_thread(run: QueryRace, save, kept: list, late: list | None = None) -> dict:
    """``run.commit`` on a worker thread; its outcome lands in the returned dict."""
    out: dict = {}

    def work() -> None:
        try:
            run.commit(save, lambda: kept.append("kept"),
                       late=(lambda: late.append("late")) if late is not None else None)
            out["returned"] = True
        except BaseException as exc:  # noqa: BLE001 - the outcome is what is checked
            out["raised"] = exc

    out["thread"] = threading.Thread(target=work, name="lattice-query")
    out["thread"].start()
    return out


def test_writing_is_set_only_while_a_save_is_in_flight():
    run = QueryRace(None, lockstep=False)
    save, kept = GatedSave(), []
    out = commit_in_thread(run, save, kept)
    assert save.entered.wait(LONG)
    assert run.writing and kept == []  # saved first, kept after
    save.gate.set()
    out["thread"].join(LONG)
    assert out.get("returned") and kept == ["kept"] and not run.writing


def test_a_failing_save_clears_writing_raises_and_keeps_nothing():
    run = QueryRace(None, lockstep=False)
    save, kept = GatedSave(OSError("disk full")), []
    out = commit_in_thread(run, save, kept)
    assert save.entered.wait(LONG)
    save.gate.set()
    out["thread"].join(LONG)
    assert isinstance(out.get("raised"), OSError) and kept == [] and not run.writing
    ran = []
    run.after_writes(lambda: ran.append(1))  # nothing in flight: runs at once
    assert ran == [1]


def test_a_late_write_is_not_kept_and_after_writes_wait_for_it():
    """The query ends while the worker is in the store: the write lands after the end. It
    is not kept in memory (``late`` runs instead, so the history resyncs the store), and
    what ``after_writes`` was given (the lock release) runs only once it has landed."""
    run = QueryRace(None, lockstep=False)
    save, kept, late, released = GatedSave(), [], [], []
    out = commit_in_thread(run, save, kept, late)
    assert save.entered.wait(LONG)
    assert run.end(Ending("error_abort", error=AbortError("stop")))
    run.after_writes(lambda: released.append("first"))
    run.after_writes(lambda: released.append(threading.current_thread().name))
    assert released == [] and run._after_write  # queued: the write is still in flight
    save.gate.set()
    out["thread"].join(LONG)
    assert isinstance(out.get("raised"), Stopped)
    assert kept == [] and late == ["late"]
    assert released == ["first", "lattice-query"]  # in order, run by the worker
    assert not run.writing and run._after_write == []


def test_a_save_failing_after_the_end_still_runs_the_after_writes():
    run = QueryRace(None, lockstep=False)
    save, released = GatedSave(OSError("gone")), []
    out = commit_in_thread(run, save, [])
    assert save.entered.wait(LONG)
    run.end(Ending("interrupted"))
    run.after_writes(lambda: released.append(1))
    save.gate.set()
    out["thread"].join(LONG)
    assert isinstance(out.get("raised"), OSError) and released == [1]


def test_no_write_starts_after_the_end():
    run = QueryRace(None, lockstep=False)
    run.end(Ending("error_abort", error=AbortError("stop")))
    save = GatedSave()
    with pytest.raises(Stopped):
        run.commit(save, lambda: None)
    assert not save.entered.is_set() and not run.writing


def test_after_writes_runs_at_once_when_no_write_is_in_flight():
    run = QueryRace(None, lockstep=False)
    run.end(Ending("success"))
    ran = []
    run.after_writes(lambda: ran.append(1))
    assert ran == [1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def frozen(monkeypatch):
    """A clock the test moves, and a timer that never fires by itself (counts cancels)."""
    clock, timers = Clock(), {"set": [], "cancelled": 0}

    def call_later(delay, callback):
        timers["set"].append(callback)

        def cancel():
            timers["cancelled"] += 1

        return cancel

    monkeypatch.setattr(race, "time", clock)
    monkeypatch.setattr(race, "call_later", call_later)
    return clock, timers


def test_a_reply_after_the_deadline_lost_the_race(frozen):
    """The timer had not fired yet (a busy machine), but the reply came too late: it is
    refused as a timeout, and the request's timer and link are undone once."""
    clock, timers = frozen
    run = QueryRace(None, lockstep=False)
    signal = run.start_model(50)
    assert run.phase is Phase.MODEL and run._request_done is not race._nothing
    clock.now += 0.051
    with pytest.raises(Stopped):
        run.finish_model()
    assert run.ended.subtype == "error_timeout" and "after the deadline" in str(run.ended.error)
    assert timers["cancelled"] == 1 and run._request_done is race._nothing
    assert not signal.aborted  # unlinked first: the request is over, nothing to cancel
    run.release()
    assert timers["cancelled"] == 1  # not undone twice


def test_a_reply_in_time_undoes_the_deadline_once(frozen):
    clock, timers = frozen
    run = QueryRace(None, lockstep=False)
    run.start_model(50)
    clock.now += 0.049
    run.finish_model()
    assert run.ended is None and run.phase is Phase.IDLE and timers["cancelled"] == 1
    run.release()
    assert timers["cancelled"] == 1


def test_release_undoes_the_deadline_of_a_request_nobody_waits_for(frozen):
    _, timers = frozen
    run = QueryRace(None, lockstep=False)
    run.start_model(50)
    run.end(Ending("error_abort", error=AbortError("stop")))
    run.release()
    assert timers["cancelled"] == 1 and run._request_done is race._nothing


def test_release_lets_go_of_the_callers_signal_once():
    controller = AbortController()
    run = QueryRace(controller.signal, lockstep=False)
    assert run._unlink is not None
    run.release()
    assert run._unlink is None
    run.release()  # idempotent
    controller.abort("later")  # the finished run no longer hears it
    assert run.ended is None
