"""QueryRun (lattice/race.py) driven directly from both sides, with events, not sleeps."""

from __future__ import annotations

import threading

import pytest

from lattice import AbortController, AbortError, RequestTimeoutError
from lattice.endings import Ending
from lattice.race import QueryRun, Stopped


def test_the_first_end_wins_and_later_ones_are_ignored():
    run = QueryRun(None, lockstep=False)
    assert run.end(Ending("success", result="a"))
    assert not run.end(Ending("interrupted"))
    assert run.ended.subtype == "success" and not run.controller.signal.aborted


def test_a_non_success_end_fires_the_runs_signal():
    run = QueryRun(None, lockstep=False)
    run.end(Ending("error_abort", error=AbortError("stop")))
    assert run.controller.signal.aborted


def test_commit_after_the_end_raises_stopped_and_keeps_nothing():
    run = QueryRun(None, lockstep=False)
    kept = []
    run.end(Ending("interrupted"))
    with pytest.raises(Stopped):
        run.commit(None, lambda: kept.append(1))
    assert kept == []


def test_a_save_that_loses_the_race_is_not_kept():
    run = QueryRun(None, lockstep=False)
    kept = []

    def save():
        run.end(Ending("error_abort", error=AbortError("late")))  # ends while saving

    with pytest.raises(Stopped):
        run.commit(save, lambda: kept.append(1))
    assert kept == []


def test_lockstep_waits_for_the_consumer_to_ask_again():
    run = QueryRun(None, lockstep=True)
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
    run = QueryRun(None, lockstep=False)
    signal = run.start_model(None)
    run.interrupt()
    assert run.ended.subtype == "interrupted" and signal.aborted
    with pytest.raises(Stopped):
        run.finish_model()


def test_interrupt_between_steps_is_seen_at_the_next_check():
    run = QueryRun(None, lockstep=False)
    run.interrupt()
    assert run.ended is None
    with pytest.raises(Stopped):
        run.check()
    assert run.ended.subtype == "interrupted"


def test_the_callers_signal_ends_the_run_with_its_reason():
    controller = AbortController()
    run = QueryRun(controller.signal, lockstep=False)
    controller.abort("user pressed stop")
    assert run.ended.subtype == "error_abort"
    assert isinstance(run.ended.error, AbortError) and "user pressed stop" in str(run.ended.error)
    run.release()


def test_a_polled_event_ends_the_run_from_the_consumer():
    from lattice.cancellation import as_signal

    event = threading.Event()
    run = QueryRun(as_signal(event), lockstep=True)
    event.set()
    assert run.next_item() is None
    assert run.ended.subtype == "error_abort"


def test_the_request_deadline_ends_the_run_as_a_timeout():
    run = QueryRun(None, lockstep=False)
    fired = threading.Event()
    signal = run.start_model(1)
    signal.add_callback(fired.set)
    assert fired.wait(5)
    assert run.ended.subtype == "error_timeout"
    assert isinstance(run.ended.error, RequestTimeoutError)


def test_wait_end_returns_the_ending_for_prompt():
    run = QueryRun(None, lockstep=False)
    threading.Thread(target=lambda: run.end(Ending("success", result="x"))).start()
    assert run.wait_end().result == "x"


def test_record_and_started_keep_a_batch_for_the_repair():
    run = QueryRun(None, lockstep=False)
    run.start_tools()
    run.mark_started("a")
    run.record("a", {"type": "tool_result", "tool_use_id": "a", "content": "done"})
    assert run.started == {"a"} and run.partial["a"]["content"] == "done"
    run.start_tools()  # a new batch forgets the old one
    assert run.started == set() and run.partial == {}
