"""One query at a time: ConcurrentQueryError, and the guard released on every exit."""
import gc
import time
from typing import Any

import pytest
from helpers import (
    LONG,
    QUICK,
    Fatal,
    assert_usable,
    blocking_client,
    function_agent,
    in_thread,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_then_text,
    tool_use,
)

import lattice
from lattice import (
    Agent,
    ConcurrentQueryError,
    HistoryStoreError,
    Tool,
    ToolContext,
    define_history_store,
)
from lattice.testing import ScriptedModelClient, assert_well_formed

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


@pytest.mark.parametrize("where", ["client", "tool"])
@pytest.mark.parametrize("error", [RuntimeError, Fatal, KeyboardInterrupt])
def test_any_exception_from_a_client_or_tool_is_raised_and_releases_the_guard(where, error):
    def bad(*args: Any) -> Any:
        raise error("boom")

    if where == "client":
        agent = Agent(model="m", model_client=bad)
    else:
        agent = Agent(model="m", model_client=tool_then_text(),
                      tools=[Tool("slow", "Bad.", {"type": "object"}, bad)])
    if where == "tool" and error is RuntimeError:
        assert agent.prompt("go").subtype == "success"  # a tool's Exception is a result
    else:
        with pytest.raises(error):
            agent.prompt("go")
    if where == "client":
        agent._settings.client = ScriptedModelClient(["fine"])
    assert_usable(agent)


def test_a_store_failing_while_the_tail_is_repaired_releases_the_guard():
    def append(message: Any) -> None:
        content = message.get("content")
        if isinstance(content, list) and any("not run" in str(b.get("content"))
                                             for b in content):
            raise OSError("disk full")

    agent = Agent(model="m", model_client=tool_then_text(),
                  tools=[Tool("slow", "T.", {"type": "object"}, lambda a: "x")],
                  history_store=define_history_store(append=append, fail_on_error=True))
    gen = agent.query("go")
    assert next(gen).type == "assistant"
    with pytest.raises(HistoryStoreError):
        gen.close()  # the repair ("the call was not run") fails in the store
    history = agent.get_history()
    assert_well_formed(history)  # the in-memory history got the repair
    assert "not run" in history[-1]["content"][0]["content"]
    assert_usable(agent)


def test_a_raising_signal_callback_does_not_keep_the_guard():
    """Fix: ``AbortSignal._fire`` runs every callback, logging an Exception (and re-raising
    a BaseException after the others ran); ``Agent._iterate``'s finally ends the run inside
    its try, so ``_release`` runs whatever ``run.end`` raises."""

    def boom() -> None:
        raise RuntimeError("callback failed")

    def watch(args: Any, context: ToolContext) -> str:
        context.signal.add_callback(boom)
        return "ok"

    agent = Agent(model="m", model_client=tool_then_text(),
                  tools=[Tool("slow", "T.", {"type": "object"}, watch)])
    gen = agent.query("go")
    for message in gen:
        if message.type == "user":
            break
    try:
        gen.close()  # ends the query: the query's signal fires, boom() raises
    finally:
        try:
            assert agent.prompt("next").subtype == "success"
        except ConcurrentQueryError:
            pytest.fail("the guard was never released")
