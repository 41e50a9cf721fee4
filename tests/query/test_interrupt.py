"""Agent.interrupt() (SPEC 5): during a request, a batch or a held message, when idle,
before the query starts or as it ends, and while the history loads."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, List

from helpers import (
    LONG,
    QUICK,
    WAIT_S,
    blocking_client,
    blocking_tool,
    function_agent,
    join_lattice_threads,
    json_copy,
    lattice_threads,
    on_call,
    reply,
    result_text,
    results_of,
    scripted,
    tool_use,
    trigger_when,
)

from lattice import (
    AbortSignal,
    Agent,
    Tool,
    define_history_store,
)
from lattice.conversation.conversation import Conversation
from lattice.testing import (
    MockMessagesServer,
    ScriptedModelClient,
    assert_well_formed,
)


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


def test_interrupt_holding_tool_reply_with_partial_messages():
    """Stream events are handed out too: the lockstep must count them."""

    ran = []
    tool_reply = reply(tool_use("t", {}, "t1"))
    with MockMessagesServer([tool_reply, "next"]) as server:
        agent = Agent(model="m", api_key="k", base_url=server.base_url,
                      include_partial_messages=True,
                      tools=[Tool("t", "T.", {"type": "object"}, lambda a: ran.append(1) or "x")])
        messages = []
        for message in agent.query("x"):
            messages.append(message)
            if message.type == "assistant":
                # Not a wait for anything: a window in which a loop that ran ahead would
                # run the batch (ran != []); the lockstep must keep it from happening.
                time.sleep(0.1)
                agent.interrupt()
        assert any(m.type == "stream_event" for m in messages)
        assert ran == [] and messages[-1].subtype == "interrupted"
        assert_well_formed(agent.get_history())


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


def test_interrupt_when_idle_is_a_no_op():
    agent, _ = scripted(["one", "two"])
    agent.interrupt()
    assert agent.prompt("a").subtype == "success"
    agent.interrupt()
    assert agent.prompt("b").subtype == "success"


def test_interrupt_before_iteration_starts_ends_the_query_without_a_request():
    agent, client = scripted(["one"])
    gen = agent.query("a")
    agent.interrupt()
    assert [m.subtype for m in gen] == ["interrupted"]
    assert client.requests == []
    assert agent.prompt("b").result == "one"


def test_interrupt_as_the_query_ends_does_not_reach_the_next_query():
    agent = Agent(model="m", model_client=ScriptedModelClient(["one", "two", "three"]))
    # After the end was decided, before the guard is released.
    with on_call(Conversation.end, agent.interrupt):
        assert agent.prompt("a").subtype == "success"
    # While the consumer holds the ResultMessage (generator not closed).
    gen = agent.query("b")
    messages = list(gen)
    assert messages[-1].subtype == "success"
    agent.interrupt()
    assert agent.prompt("c").result == "three"
    # Before iteration starts the query already runs (SPEC 10a): it ends with no request.
    gen = agent.query("d")
    agent.interrupt()
    assert [m.subtype for m in gen] == ["interrupted"]
    assert [m.get("content") for m in agent.get_history()][-2:] == [
        [{"type": "text", "text": "three"}], "d"]


def test_interrupt_while_the_history_loads_is_not_lost():
    """Fix: ``Conversation.start`` makes the ``QueryRun`` (so ``interrupt()`` reaches it)
    right after taking the guard, before the store is loaded."""
    loading, loaded = threading.Event(), threading.Event()

    def load() -> List[Any]:
        loading.set()
        loaded.wait(WAIT_S)
        return []

    client = ScriptedModelClient(["answer"])
    agent = Agent(model="m", model_client=client,
                  history_store=define_history_store(load=load))

    def interrupter() -> None:
        loading.wait(WAIT_S)
        agent.interrupt()  # prompt() has started: this query is running
        loaded.set()

    thread = threading.Thread(target=interrupter)
    thread.start()
    result = agent.prompt("hi")
    thread.join()
    assert result.subtype == "interrupted" and client.requests == []


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
