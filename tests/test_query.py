"""One query at a time: ConcurrentQueryError, and the guard released on every exit."""
import gc
import threading

import pytest
from helpers import reply, tool_use

from lattice import Agent, ConcurrentQueryError, Tool
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed


def test_second_query_from_another_thread_is_refused_and_first_unaffected():
    entered, release = threading.Event(), threading.Event()

    def slow(request):
        entered.set()
        release.wait(5)
        return "first done"

    agent = Agent(model="m", model_client=slow)
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("r", agent.prompt("one")))
    worker.start()
    assert entered.wait(5)
    with pytest.raises(ConcurrentQueryError):
        agent.prompt("two")
    with pytest.raises(ConcurrentQueryError):  # the guard is taken when query() is called
        agent.query("three")
    with pytest.raises(ConcurrentQueryError):
        agent.replace_history([])
    release.set()
    worker.join(5)
    assert out["r"].result == "first done"
    assert [m["content"] for m in agent.get_history()][0] == "one"
    assert len(agent.get_history()) == 2


def test_query_from_inside_own_tool_is_refused():
    holder = {}

    def nested(args):
        try:
            holder["agent"].prompt("nested")
        except ConcurrentQueryError as exc:
            return f"refused: {type(exc).__name__}"
        return "ran"

    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("nested", {}, "t1")), "ok"]),
        tools=[Tool("nested", "N.", {"type": "object"}, nested)])
    holder["agent"] = agent
    assert agent.prompt("x").result == "ok"
    assert agent.get_history()[2]["content"][0]["content"] == "refused: ConcurrentQueryError"


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


def test_guard_released_when_generator_closed_mid_batch():
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("t", {}, "t1")), "after"]),
        tools=[Tool("t", "T.", {"type": "object"}, lambda a: "ran")])
    gen = agent.query("x")
    first = next(gen)
    assert first.type == "assistant"
    gen.close()
    history = agent.get_history()
    assert_well_formed(history)
    assert "not run" in history[-1]["content"][0]["content"]
    assert agent.prompt("again").result == "after"


def test_guard_released_when_generator_abandoned():
    agent = Agent(model="m", model_client=FunctionModelClient(
        lambda r: reply(tool_use("t", {}, f"t{len(r.messages)}"))),
        tools=[Tool("t", "T.", {"type": "object"}, lambda a: "ran")])
    gen = agent.query("x")
    next(gen)
    del gen
    gc.collect()
    agent.replace_history([])  # would raise if the guard were still held


def test_guard_released_before_result_is_yielded():
    agent = Agent(model="m", model_client=ScriptedModelClient(["a", "b"]))
    gen = agent.query("x")
    for message in gen:
        if message.type == "result":
            # consumer stops at the result without closing: next query works at once
            assert agent.prompt("y").result == "b"


def test_unstarted_generator_does_not_hold_guard():
    agent = Agent(model="m", model_client=ScriptedModelClient(["a"]))
    agent.query("never iterated")
    assert agent.prompt("x").result == "a"
