"""One query at a time: ConcurrentQueryError, and the guard released on every exit."""
import gc
import time

import pytest
from helpers import (
    LONG,
    QUICK,
    blocking_client,
    function_agent,
    in_thread,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_use,
)

import lattice
from lattice import Agent, ConcurrentQueryError, Tool
from lattice.testing import assert_well_formed


def test_guard_released_after_success_error_and_exception():
    calls = []

    def fn(request):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("client broke")
        return "ok"

    agent = Agent(model="m", model_client=fn, max_turns=1)
    agent.prompt("a")
    with pytest.raises(RuntimeError):
        agent.prompt("b")
    assert agent.prompt("c").result == "ok"


# -- SPEC 3: one query at a time, the guard on every way out ---------------------------------


def test_second_query_from_another_thread_raises_at_once(gates):
    fn, entered, release, _ = blocking_client(gates, lambda r: reply("first done"))
    agent, _ = function_agent(fn)
    box = {}
    t = in_thread(lambda: box.setdefault("r", agent.prompt("first")))
    assert entered.wait(LONG)
    started = time.monotonic()
    with pytest.raises(ConcurrentQueryError):
        agent.prompt("second")
    with pytest.raises(ConcurrentQueryError):
        run(agent, "third")
    with pytest.raises(ConcurrentQueryError):
        agent.replace_history([])
    assert time.monotonic() - started < QUICK
    release.set()
    t.join(LONG)
    assert box["r"].subtype == "success" and box["r"].result == "first done"
    assert [m["content"] for m in agent.get_history() if m["role"] == "user"] == ["first"]


def test_second_query_from_inside_a_tool_raises():
    seen = {}

    def reenter(_input, context):
        try:
            context.agent.prompt("nested")
        except ConcurrentQueryError as exc:
            seen["exc"] = exc
        return "fine"

    agent, client = scripted([reply(tool_use("reenter", {}, "t1")), "outer done"],
                             tools=[Tool("reenter", "R.", {"type": "object"}, reenter)])
    r = agent.prompt("outer")
    assert isinstance(seen["exc"], ConcurrentQueryError)
    assert r.result == "outer done" and len(client.requests) == 2


def test_guard_taken_when_query_is_called():
    agent, client = scripted(["one", "two"])
    gen = agent.query("not started")
    with pytest.raises(ConcurrentQueryError):
        agent.prompt("refused")
    with pytest.raises(ConcurrentQueryError):
        agent.replace_history([])
    gen.close()  # never advanced: ends the query, history unchanged
    assert agent.get_history() == [] and client.requests == []
    assert agent.prompt("runs").result == "one"


def test_a_dropped_query_that_never_started_frees_the_agent():
    agent, _ = scripted(["one"])
    agent.query("dropped")
    gc.collect()
    assert agent.prompt("runs").result == "one"


def test_guard_released_just_before_result_is_yielded():
    agent, _ = scripted(["one", "two"])
    gen = agent.query("a")
    for message in gen:
        if message.type == "result":
            assert agent.prompt("b").result == "two"  # generator not closed yet
            break


def test_guard_released_when_generator_closed():
    agent, _ = scripted([reply("calling", tool_use("x", {}, "t1")), "after"])
    gen = agent.query("a")
    first = next(gen)
    assert first.type == "assistant"
    gen.close()
    assert agent.prompt("b").result == "after"
    history = agent.get_history()
    assert_well_formed(history)
    [block] = results_of(history[2])
    assert block.get("is_error") is True and "not run" in result_text(block).lower()


def test_guard_released_when_generator_abandoned():
    agent, _ = scripted([reply(tool_use("x", {}, "t1")), "after"])
    gen = agent.query("a")
    next(gen)
    del gen
    gc.collect()
    assert agent.prompt("b").result == "after"
    assert_well_formed(agent.get_history())


def test_guard_released_after_exception():
    calls = []

    def fn(request):
        calls.append(1)
        if len(calls) == 1:
            raise lattice.APIConnectionError("down")
        return reply("back")

    agent, _ = function_agent(fn)
    with pytest.raises(lattice.APIConnectionError):
        agent.prompt("a")
    assert agent.prompt("b").result == "back"
    assert_well_formed(agent.get_history())


def test_suspended_generator_still_holds_the_guard():
    agent, _ = scripted([reply(tool_use("t", {}, "1")), "done", "later"],
                        tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    gen = agent.query("go")
    assert next(gen).type == "assistant"
    with pytest.raises(ConcurrentQueryError):
        agent.prompt("other")
    with pytest.raises(ConcurrentQueryError):
        agent.replace_history([])
    assert list(gen)[-1].subtype == "success"
    assert agent.prompt("later").result == "later"
