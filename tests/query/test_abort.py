"""Aborting a query through its signal (SPEC 5): during a request or a tool that
never returns, before it starts, between turns; threading.Event signals; what tools see.
Bounds are wide (seconds), the asserted behaviour is exact."""

from __future__ import annotations

import random
import threading
import time
from typing import Any, List

import pytest
from helpers import (
    FOREVER,
    LONG,
    QUICK,
    WAIT_S,
    blocking_client,
    blocking_tool,
    function_agent,
    hung_client,
    join_lattice_threads,
    json_copy,
    lattice_threads,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_use,
    trigger_when,
)

from lattice import (
    AbortController,
    AbortError,
    AbortSignal,
    Agent,
    Tool,
)
from lattice.testing import (
    ScriptedModelClient,
    assert_well_formed,
)


def test_abort_during_a_request_that_never_returns(gates):
    fn, entered, _, requests = blocking_client(gates)
    agent, _ = function_agent(fn)
    controller = AbortController()
    box = trigger_when(entered, controller.abort)
    r = agent.prompt("go", signal=controller.signal)
    assert time.monotonic() - box["t"] < QUICK
    assert r.subtype == "error_abort" and r.is_error is True
    assert isinstance(r.error, AbortError)
    assert requests[0].signal.aborted
    assert_well_formed(json_copy(agent.get_history()))
    assert [m["role"] for m in agent.get_history()] == ["user"]


def test_abort_during_a_tool_that_never_returns(gates):
    hang, entered, _, calls = blocking_tool(gates)
    agent, _ = scripted([reply(tool_use("hang", {}, "t1"))], tools=[hang])
    controller = AbortController()
    box = trigger_when(entered, controller.abort)
    messages = run(agent, "go", signal=controller.signal)
    assert time.monotonic() - box["t"] < QUICK
    r = messages[-1]
    assert r.subtype == "error_abort" and isinstance(r.error, AbortError)
    assert calls[0].signal.aborted
    history = agent.get_history()
    assert_well_formed(json_copy(history))
    assert results_of(history[2])[0].get("is_error") is True


def test_abort_during_hung_tool_answers_every_call():
    started = threading.Event()

    def hang(args):
        started.set()
        time.sleep(FOREVER)
        return "late"

    controller = AbortController()
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("quick", {}, "t1"), tool_use("hang", {}, "t2"), tool_use("quick", {}, "t3"))]),
        tools=[Tool("hang", "H.", {"type": "object"}, hang),
               Tool("quick", "Q.", {"type": "object"}, lambda a: "quick done")])
    threading.Thread(target=lambda: (started.wait(5), controller.abort())).start()
    t0 = time.monotonic()
    result = agent.prompt("x", signal=controller.signal)
    assert result.subtype == "error_abort" and time.monotonic() - t0 < 2
    history = agent.get_history()
    assert_well_formed(history)
    contents = [b["content"] for b in history[-1]["content"]]
    assert contents[0] == "quick done"
    assert contents[1] == ("The call was stopped before it finished (its result was discarded): "
                           "the query was aborted.")
    assert contents[2] == "The call was not run: the query was aborted."


def test_already_aborted_signal_makes_no_request():
    agent, client = scripted(["never"])
    controller = AbortController()
    controller.abort("stop")
    r = agent.prompt("go", signal=controller.signal)
    assert r.subtype == "error_abort" and isinstance(r.error, AbortError)
    assert client.requests == []
    assert_well_formed(json_copy(agent.get_history()))


def test_threading_event_is_a_signal(gates):
    event = threading.Event()
    event.set()
    agent, client = scripted(["never"])
    assert agent.prompt("go", signal=event).subtype == "error_abort"
    assert client.requests == []

    fn, entered, _, _ = blocking_client(gates)
    agent, _ = function_agent(fn)
    live = threading.Event()
    box = trigger_when(entered, live.set)
    r = agent.prompt("go", signal=live)
    assert r.subtype == "error_abort" and time.monotonic() - box["t"] < QUICK


def test_abort_signal_timeout(gates):
    fn, _, _, _ = blocking_client(gates)
    agent, _ = function_agent(fn)
    started = time.monotonic()
    r = agent.prompt("go", signal=AbortSignal.timeout(50))
    assert r.subtype == "error_abort" and isinstance(r.error, AbortError)
    assert time.monotonic() - started < QUICK


def test_signal_bounds_the_whole_query_not_each_request():
    def fn(request):
        time.sleep(0.03)  # slow model work, that the signal's 150 ms must cut: not a wait
        return reply(tool_use("t", {}, f"t{len(request.messages)}"))

    agent, client = function_agent(fn, tools=[Tool("t", "T.", {"type": "object"},
                                                   lambda i: "x")])
    r = agent.prompt("go", signal=AbortSignal.timeout(150))
    assert r.subtype == "error_abort" and 2 <= len(client.requests) < 40
    assert_well_formed(json_copy(agent.get_history()))


def test_signals_are_always_abort_signals():
    seen = {}

    def handler(_input, context):
        seen["tool"] = context.signal
        return "x"

    agent, client = scripted([reply(tool_use("t", {}, "1")), "done"],
                             tools=[Tool("t", "T.", {"type": "object"}, handler)])
    agent.prompt("go")
    assert isinstance(seen["tool"], AbortSignal) and not seen["tool"].aborted
    for request in client.requests:
        assert isinstance(request.signal, AbortSignal)


def test_request_signal_is_a_signal_without_query_signal():
    seen = []
    Agent(model="m", model_client=lambda r: seen.append(r.signal) or "ok").prompt("x")
    assert isinstance(seen[0], AbortSignal) and not seen[0].aborted


def test_abort_after_a_tool_batch_stops_before_the_next_request():
    controller = AbortController()
    t = Tool("t", "T.", {"type": "object"}, lambda i: controller.abort() or "did it")
    agent, client = scripted([reply(tool_use("t", {}, "1")), "never"], tools=[t])
    r = agent.prompt("go", signal=controller.signal)
    assert r.subtype == "error_abort" and len(client.requests) == 1
    assert_well_formed(json_copy(agent.get_history()))


def test_abort_while_holding_the_assistant_message():
    calls = []
    t = Tool("t", "T.", {"type": "object"}, lambda i: calls.append(i) or "ran")
    agent, client = scripted([reply(tool_use("t", {}, "1")), "never"], tools=[t])
    controller = AbortController()
    gen = agent.query("go", signal=controller.signal)
    assert next(gen).type == "assistant"
    controller.abort()
    r = list(gen)[-1]
    assert r.subtype == "error_abort" and isinstance(r.error, AbortError)
    assert calls == [] and len(client.requests) == 1
    history = agent.get_history()
    assert_well_formed(json_copy(history))
    [block] = results_of(history[2])
    assert block.get("is_error") is True and "not run" in result_text(block).lower()


def test_tool_context_signal_fires_on_abort():
    fired = threading.Event()
    started = threading.Event()

    def cooperative(args, context):
        started.set()
        if context.signal.wait(5):
            fired.set()
        return "stopped early"

    controller = AbortController()
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(tool_use("c", {}, "t1"))]),
                  tools=[Tool("c", "C.", {"type": "object"}, cooperative)])
    threading.Thread(target=lambda: (started.wait(5), controller.abort())).start()
    assert agent.prompt("x", signal=controller.signal).subtype == "error_abort"
    assert fired.wait(2)


def test_threading_event_fires_tool_context_signal():
    before = set(lattice_threads())
    event, seen = threading.Event(), []

    def patient(_input, context):
        event.set()
        context.signal.wait(LONG)
        seen.append(context.signal.aborted)
        return "x"

    agent, _ = scripted([reply(tool_use("p", {}, "1"))],
                        tools=[Tool("p", "P.", {"type": "object"}, patient)])
    assert agent.prompt("go", signal=event).subtype == "error_abort"
    join_lattice_threads(before, LONG)
    assert seen == [True]


def test_abort_reason_reaches_the_result():
    mine = AbortError("the user left")
    controller = AbortController()
    controller.abort(mine)
    agent = Agent(model="m", model_client=ScriptedModelClient(["never"]))
    assert agent.prompt("x", signal=controller.signal).error is mine
    started = threading.Event()
    controller = AbortController()
    agent = Agent(model="m", model_client=hung_client(started))
    threading.Thread(target=lambda: (started.wait(5), controller.abort("shutting down"))).start()
    result = agent.prompt("x", signal=controller.signal)
    assert isinstance(result.error, AbortError) and str(result.error) == "shutting down"


def test_abort_reaches_the_query_past_a_raising_callback():
    """Fix: ``AbortSignal._fire`` isolates callbacks (see above)."""
    entered, release = threading.Event(), threading.Event()

    def hang(request: Any) -> str:
        entered.set()
        release.wait(WAIT_S)
        return "late"

    controller = AbortController()
    controller.signal.add_callback(lambda: 1 / 0)  # the caller's own, registered first
    agent = Agent(model="m", model_client=hang)
    out: List[Any] = []
    runner = threading.Thread(target=lambda: out.append(
        agent.prompt("go", signal=controller.signal)))
    runner.start()
    try:
        assert entered.wait(WAIT_S)
        try:
            controller.abort()
        except ZeroDivisionError:  # the callbacks after it (the query's) never ran
            pytest.fail("abort() stopped at the caller's failing callback")
        runner.join(WAIT_S)
        assert out and out[0].subtype == "error_abort"
    finally:
        release.set()
        runner.join(WAIT_S)


def test_a_late_reply_never_enters_the_history_even_during_the_next_query():
    entered, release = threading.Event(), threading.Event()
    workers: List[threading.Thread] = []
    calls = []

    def client(request: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            workers.append(threading.current_thread())
            entered.set()
            release.wait(WAIT_S)
            return "late"
        if len(calls) == 2:
            release.set()  # the first worker's reply arrives while this query runs
            workers[0].join(WAIT_S)
        return "fresh"

    agent = Agent(model="m", model_client=client)
    controller = AbortController()
    threading.Thread(target=lambda: entered.wait(WAIT_S) and controller.abort()).start()
    assert agent.prompt("one", signal=controller.signal).subtype == "error_abort"
    assert agent.prompt("two").result == "fresh"
    assert not workers[0].is_alive()
    texts = [m["content"] for m in agent.get_history()]
    assert texts[:2] == ["one", "two"] and "late" not in str(texts)


@pytest.mark.slow
def test_event_abort_storm_in_sequential_batches_leaves_every_call_answered():
    """10,000 queries; a tool sets the query's Event at a random call of the batch."""
    rng = random.Random(7)
    for n in range(10_000):
        event = threading.Event()
        fire_at = rng.randint(0, 3)
        handler = _firing_at(event, fire_at)

        uses = [tool_use("t", id=f"c{n}-{k}") for k in range(3)]
        agent = Agent(model="m", model_client=ScriptedModelClient([reply(*uses), "done"]),
                      tools=[Tool("t", "T.", {"type": "object"}, handler)])
        result = agent.prompt("go", signal=event)
        history = agent.get_history()
        assert_well_formed(history)
        answered = [b["tool_use_id"] for b in history[2]["content"]]
        assert answered == [u["id"] for u in uses]
        assert result.subtype == ("error_abort" if fire_at < 3 else "success")


def _firing_at(event, fire_at):
    count = [0]

    def handler(args):
        if count[0] == fire_at:
            event.set()
        count[0] += 1
        return "ok"

    return handler
