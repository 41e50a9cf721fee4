"""QueryRun (lattice/query/race.py) driven directly from both sides, with events, not sleeps;
and the workers it abandons (SPEC 16a), counted and warned about."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import (
    FOREVER,
    WAIT_S,
    reply,
    tool_use,
    trigger_when,
)

from lattice import (
    AbortController,
    AbortError,
    Agent,
    RequestTimeoutError,
    Tool,
)
from lattice.query.endings import Ending
from lattice.query.race import QueryRace, Stopped
from lattice.testing import (
    ScriptedModelClient,
)


def test_the_first_end_wins_and_later_ones_are_ignored():
    run = QueryRace(None, lockstep=False)
    assert run.end(Ending("success", result="a"))
    assert not run.end(Ending("interrupted"))
    assert run.ended.subtype == "success" and not run.controller.signal.aborted


def test_a_non_success_end_fires_the_runs_signal():
    run = QueryRace(None, lockstep=False)
    run.end(Ending("error_abort", error=AbortError("stop")))
    assert run.controller.signal.aborted


def test_commit_after_the_end_raises_stopped_and_keeps_nothing():
    run = QueryRace(None, lockstep=False)
    kept = []
    run.end(Ending("interrupted"))
    with pytest.raises(Stopped):
        run.commit(None, lambda: kept.append(1))
    assert kept == []


def test_a_save_that_loses_the_race_is_not_kept():
    run = QueryRace(None, lockstep=False)
    kept = []

    def save():
        run.end(Ending("error_abort", error=AbortError("late")))  # ends while saving

    with pytest.raises(Stopped):
        run.commit(save, lambda: kept.append(1))
    assert kept == []


def test_lockstep_waits_for_the_consumer_to_ask_again():
    run = QueryRace(None, lockstep=True)
    kept, passed = [], threading.Event()

    def worker():
        run.commit(None, lambda: kept.append("a"), "item-a")
        passed.set()
        run.end(Ending("success"))

    threading.Thread(target=worker).start()
    assert run.next_item() == "item-a"
    assert not passed.wait(0.05)  # the worker waits while the consumer holds the item
    assert run.next_item() is None and passed.is_set() and kept == ["a"]


def test_interrupt_during_a_model_request_ends_at_once():
    run = QueryRace(None, lockstep=False)
    signal = run.start_model(None)
    run.interrupt()
    assert run.ended.subtype == "interrupted" and signal.aborted
    with pytest.raises(Stopped):
        run.finish_model()


def test_interrupt_between_steps_is_seen_at_the_next_check():
    run = QueryRace(None, lockstep=False)
    run.interrupt()
    assert run.ended is None
    with pytest.raises(Stopped):
        run.check()
    assert run.ended.subtype == "interrupted"


def test_the_callers_signal_ends_the_run_with_its_reason():
    controller = AbortController()
    run = QueryRace(controller.signal, lockstep=False)
    controller.abort("user pressed stop")
    assert run.ended.subtype == "error_abort"
    assert isinstance(run.ended.error, AbortError) and "user pressed stop" in str(run.ended.error)
    run.release()


def test_a_polled_event_ends_the_run_from_the_consumer():
    from lattice.cancellation import as_signal

    event = threading.Event()
    run = QueryRace(as_signal(event), lockstep=True)
    event.set()
    assert run.next_item() is None
    assert run.ended.subtype == "error_abort"


def test_the_request_deadline_ends_the_run_as_a_timeout():
    run = QueryRace(None, lockstep=False)
    fired = threading.Event()
    signal = run.start_model(1)
    signal.add_callback(fired.set)
    assert fired.wait(5)
    assert run.ended.subtype == "error_timeout"
    assert isinstance(run.ended.error, RequestTimeoutError)


def test_without_lockstep_the_consumer_just_waits_for_the_end():
    run = QueryRace(None, lockstep=False)
    threading.Thread(target=lambda: run.end(Ending("success", result="x"))).start()
    assert run.next_item() is None and run.ended.result == "x"


def test_record_and_started_keep_a_batch_for_the_repair():
    run = QueryRace(None, lockstep=False)
    run.start_tools()
    run.mark_started("a")
    run.record("a", {"type": "tool_result", "tool_use_id": "a", "content": "done"})
    assert run.started == {"a"} and run.partial["a"]["content"] == "done"
    run.start_tools()  # a new batch forgets the old one
    assert run.started == set() and run.partial == {}


# -- abandoned workers are visible (SPEC 16a) ------------------------------------------------


def test_workers_that_ignore_cancellation_are_warned_about_past_ten(gates, monkeypatch,
                                                                      caplog):
    import logging

    from lattice.query import abandoned

    registry = abandoned.Abandoned()  # this test's count, whatever earlier tests left running
    monkeypatch.setattr(abandoned, "REGISTRY", registry)
    monkeypatch.setattr(abandoned, "ABANDONED_AFTER_S", 0.2)  # the test need not wait a second

    def stuck_agent():
        gate, entered = gates.new(), threading.Event()
        tool = Tool("stuck", "Ignores its signal.", {"type": "object"},
                    lambda args: entered.set() or (gate.wait(FOREVER) and "too late"))
        client = ScriptedModelClient([reply(tool_use("stuck", id="t1"))])
        return Agent(model="m", model_client=client, tools=[tool]), entered

    def abandon(count):
        for _ in range(count):
            agent, entered = stuck_agent()
            controller = AbortController()  # aborted once the tool runs, however loaded
            trigger_when(entered, controller.abort)
            assert agent.prompt("go", signal=controller.signal).subtype == "error_abort"

    def warnings():
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "still running" in r.getMessage()]

    def wait_for(count, warned):
        deadline = time.monotonic() + WAIT_S
        while (abandoned.abandoned_workers(), len(warnings())) != (count, warned) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (abandoned.abandoned_workers(), len(warnings())) == (count, warned)

    with caplog.at_level(logging.WARNING, logger="lattice"):
        abandon(10)
        wait_for(10, 0)  # ten are tolerated
        abandon(1)
        wait_for(11, 1)
        assert warnings()[0].startswith("11 lattice worker threads")
        assert "holding the GIL" in warnings()[0]
        abandon(9)
        wait_for(20, 1)  # once per 10 more
        abandon(1)
        wait_for(21, 2)
        assert warnings()[1].startswith("21 ")
        gates.release_all()  # the tools return at last: nobody is left behind
        wait_for(0, 2)


def test_a_worker_that_stops_in_time_is_not_counted(monkeypatch):
    from lattice.query import abandoned

    registry = abandoned.Abandoned()
    monkeypatch.setattr(abandoned, "REGISTRY", registry)
    entered, finished = threading.Event(), threading.Event()

    def slow(args):  # ignores the signal, but is done well within ABANDONED_AFTER_S
        entered.set()
        time.sleep(0.1)
        finished.set()
        return "done"

    tool = Tool("slow", "Slow.", {"type": "object"}, slow)
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(tool_use("slow"))]),
                  tools=[tool])
    controller = AbortController()  # aborted once the tool runs, however loaded
    trigger_when(entered, controller.abort)
    assert agent.prompt("go", signal=controller.signal).subtype == "error_abort"
    assert finished.wait(WAIT_S)
    # Nothing to wait for but the moment the worker is looked at (a timer), and past it.
    time.sleep(abandoned.ABANDONED_AFTER_S + 0.3)
    assert abandoned.abandoned_workers() == 0 and registry.warned == 0
