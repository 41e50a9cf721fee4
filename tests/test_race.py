"""QueryRun (lattice/race.py) driven directly from both sides, with events, not sleeps."""

from __future__ import annotations

import json
import threading
import time

import pytest
from helpers import (
    LONG,
    QUICK,
    blocking_client,
    blocking_tool,
    function_agent,
    join_lattice_threads,
    json_copy,
    lattice_threads,
    reply,
    result_text,
    results_of,
    scripted,
    tool_use,
    trigger_when,
)

from lattice import (
    AbortController,
    AbortError,
    AbortSignal,
    RequestTimeoutError,
    Tool,
)
from lattice.endings import Ending
from lattice.race import QueryRun, Stopped
from lattice.testing import assert_well_formed


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


def test_without_lockstep_the_consumer_just_waits_for_the_end():
    run = QueryRun(None, lockstep=False)
    threading.Thread(target=lambda: run.end(Ending("success", result="x"))).start()
    assert run.next_item() is None and run.ended.result == "x"


def test_record_and_started_keep_a_batch_for_the_repair():
    run = QueryRun(None, lockstep=False)
    run.start_tools()
    run.mark_started("a")
    run.record("a", {"type": "tool_result", "tool_use_id": "a", "content": "done"})
    assert run.started == {"a"} and run.partial["a"]["content"] == "done"
    run.start_tools()  # a new batch forgets the old one
    assert run.started == set() and run.partial == {}


# -- Agent.interrupt() (SPEC 5), through the Agent -------------------------------------------


def test_interrupt_during_request_discards_the_reply(gates):
    before = set(lattice_threads())
    fn, entered, release, requests = blocking_client(gates)
    agent, _ = function_agent(fn)
    box = trigger_when(entered, agent.interrupt)
    r = agent.prompt("draft notes")
    elapsed = time.monotonic() - box["t"]
    assert r.subtype == "interrupted" and r.is_error is False
    assert elapsed < QUICK
    assert isinstance(requests[0].signal, AbortSignal) and requests[0].signal.aborted
    release.set()
    join_lattice_threads(before, LONG)  # the worker has taken the late reply (and dropped it)
    # the late reply never enters the history
    assert agent.get_history() == [{"role": "user", "content": "draft notes"}]


def test_interrupt_during_batch_completes_the_batch(gates):
    hang, entered, release, calls = blocking_tool(gates)
    second = Tool("second", "S.", {"type": "object"}, lambda i: "second ran")
    agent, client = scripted([reply(tool_use("hang", {}, "t1"), tool_use("second", {}, "t2")), "never"],
                             tools=[hang, second])

    def interrupt_then_release():
        agent.interrupt()
        release.set()

    trigger_when(entered, interrupt_then_release)
    r = agent.prompt("go")
    assert r.subtype == "interrupted" and r.is_error is False
    blocks = results_of(agent.get_history()[2])
    assert [result_text(b) for b in blocks] == ["tool done", "second ran"]
    assert not any(b.get("is_error") for b in blocks)
    assert len(client.requests) == 1
    assert calls[0].signal.aborted  # ToolContext.signal fired on interrupt


def test_interrupt_fires_tool_context_signal_so_tools_stop_early():
    def patient(_input, context):
        context.signal.wait(LONG)
        return "stopped early" if context.signal.aborted else "timed out"

    entered = threading.Event()
    agent, _ = function_agent(lambda r: (entered.set(), reply(tool_use("patient", {}, "p1")))[1],
                              tools=[Tool("patient", "P.", {"type": "object"}, patient)])
    trigger_when(entered, agent.interrupt)
    r = agent.prompt("go")
    assert r.subtype == "interrupted"
    assert result_text(results_of(agent.get_history()[2])[0]) == "stopped early"


def test_interrupt_while_holding_the_assistant_message():
    calls = []
    t = Tool("act", "A.", {"type": "object"}, lambda i: calls.append(i) or "acted")
    agent, client = scripted([reply("will act", tool_use("act", {}, "a1"), tool_use("act", {}, "a2")),
                              "next conversation"], tools=[t])
    gen = agent.query("go")
    messages = [next(gen)]
    assert messages[0].type == "assistant"
    agent.interrupt()
    messages.extend(gen)
    r = messages[-1]
    assert r.type == "result" and r.subtype == "interrupted" and r.is_error is False
    assert calls == []
    history = agent.get_history()
    assert_well_formed(json_copy(history))
    for block in results_of(history[2]):
        assert block.get("is_error") is True and "interrupt" in result_text(block).lower()
    assert len(client.requests) == 1
    assert agent.prompt("continue").result == "next conversation"
    assert len(client.requests[1].messages) == 4


def test_interrupt_when_idle_is_a_no_op():
    agent, _ = scripted(["one", "two"])
    agent.interrupt()
    assert agent.prompt("a").subtype == "success"
    agent.interrupt()
    assert agent.prompt("b").subtype == "success"


def test_interrupted_conversation_continues(gates):
    fn, entered, release, requests = blocking_client(gates)
    calls = []

    def client(request):
        calls.append(request)
        if len(calls) == 1:
            return fn(request)
        return reply("fresh")

    agent, _ = function_agent(client)
    trigger_when(entered, agent.interrupt)
    assert agent.prompt("first").subtype == "interrupted"
    assert agent.prompt("second").result == "fresh"
    assert [m["content"] for m in calls[1].messages] == ["first", "second"]  # consecutive users


def test_interrupt_while_suspended_after_the_tool_results():
    t = Tool("t", "T.", {"type": "object"}, lambda i: "ran")
    agent, client = scripted([reply(tool_use("t", {}, "1")), "second reply"], tools=[t])
    gen = agent.query("go")
    assert next(gen).type == "assistant"
    assert next(gen).type == "user"
    # give a read-ahead worker time to make (and finish) the next request, if it does
    deadline = time.monotonic() + 0.3
    while len(client.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    agent.interrupt()  # the generator has not yielded its result: the query still runs
    rest = list(gen)
    assert rest[-1].subtype == "interrupted"
    assert "second reply" not in json.dumps(agent.get_history())
    assert_well_formed(json_copy(agent.get_history()))


def test_interrupt_while_holding_the_result_does_not_affect_the_next_query():
    agent, _ = scripted(["one", "two"])
    gen = agent.query("a")
    for message in gen:
        if message.type == "result":
            agent.interrupt()  # the query has ended: a no-op
    assert agent.prompt("b").subtype == "success"


def test_interrupt_before_iteration_starts_ends_the_query_without_a_request():
    agent, client = scripted(["one"])
    gen = agent.query("a")
    agent.interrupt()
    assert [m.subtype for m in gen] == ["interrupted"]
    assert client.requests == []
    assert agent.prompt("b").result == "one"


def test_interrupt_from_inside_a_tool_lets_the_batch_finish():
    def stopper(_input, context):
        context.agent.interrupt()
        return "stopping"

    tools = [Tool("stop", "S.", {"type": "object"}, stopper),
             Tool("other", "O.", {"type": "object"}, lambda i: "other ran")]
    agent, client = scripted([reply(tool_use("stop", {}, "1"), tool_use("other", {}, "2")), "never"],
                             tools=tools)
    r = agent.prompt("go")
    assert r.subtype == "interrupted" and len(client.requests) == 1
    assert [result_text(b) for b in results_of(agent.get_history()[2])] == ["stopping",
                                                                           "other ran"]
