"""SPEC conformance: one query at a time, guard timing, well-formed history (section 3),
time limits and cancellation (section 5)."""

import gc
import json
import threading
import time

import pytest
from helpers import (
    Gates,
    assert_well_formed,
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
from lattice import (
    AbortController,
    AbortError,
    AbortSignal,
    ConcurrentQueryError,
    RequestTimeoutError,
    Tool,
    ToolContext,
    ToolResult,
)

LONG = 10  # seconds a misbehaving client/tool would block (released at teardown)
QUICK = 1.0  # "within about 100 ms", with a wide margin


@pytest.fixture
def gates():
    g = Gates()
    yield g
    g.release_all()


def blocking_client(gates, then=lambda r: reply("late reply")):
    """A client that ignores signal and timeout: blocks until released (or LONG)."""
    entered, release = gates.new(), gates.new()
    requests = []

    def fn(request):
        requests.append(request)
        entered.set()
        release.wait(LONG)
        out = then(request)
        requests.append("returned")
        return out

    return fn, entered, release, requests


def blocking_tool(gates, name="hang", result="tool done"):
    entered, release = gates.new(), gates.new()
    calls = []

    def handler(_input, context):
        calls.append(context)
        entered.set()
        release.wait(LONG)
        return result

    return Tool(name, "Blocks.", {"type": "object"}, handler), entered, release, calls


def trigger_when(event, action):
    """In a thread: wait for ``event``, note the time, run ``action``."""
    box = {}

    def go():
        assert event.wait(LONG)
        box["t"] = time.monotonic()
        action()

    box["thread"] = in_thread(go)
    return box


# -- one query at a time -------------------------------------------------------------------------

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


# -- interrupt ----------------------------------------------------------------------------------

def test_interrupt_during_request_discards_the_reply(gates):
    fn, entered, release, requests = blocking_client(gates)
    agent, _ = function_agent(fn)
    box = trigger_when(entered, agent.interrupt)
    r = agent.prompt("draft notes")
    elapsed = time.monotonic() - box["t"]
    assert r.subtype == "interrupted" and r.is_error is False
    assert elapsed < QUICK
    assert isinstance(requests[0].signal, AbortSignal) and requests[0].signal.aborted
    release.set()
    deadline = time.monotonic() + LONG
    while "returned" not in requests and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)  # give a late reply every chance to (wrongly) land
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
        deadline = time.monotonic() + LONG
        while not context.signal.aborted and time.monotonic() < deadline:
            time.sleep(0.005)
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
    assert_well_formed(history)
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


# -- abort ---------------------------------------------------------------------------------------

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
    assert_well_formed(agent.get_history())
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
    assert_well_formed(history)
    assert results_of(history[2])[0].get("is_error") is True


def test_already_aborted_signal_makes_no_request():
    agent, client = scripted(["never"])
    controller = AbortController()
    controller.abort("stop")
    r = agent.prompt("go", signal=controller.signal)
    assert r.subtype == "error_abort" and isinstance(r.error, AbortError)
    assert client.requests == []
    assert_well_formed(agent.get_history())


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


def test_abort_controller_basics():
    controller = AbortController()
    assert isinstance(controller.signal, AbortSignal) and controller.signal.aborted is False
    controller.abort("because")
    assert controller.signal.aborted is True and controller.signal.reason == "because"


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


def test_abort_after_a_tool_batch_stops_before_the_next_request():
    controller = AbortController()
    t = Tool("t", "T.", {"type": "object"}, lambda i: controller.abort() or "did it")
    agent, client = scripted([reply(tool_use("t", {}, "1")), "never"], tools=[t])
    r = agent.prompt("go", signal=controller.signal)
    assert r.subtype == "error_abort" and len(client.requests) == 1
    assert_well_formed(agent.get_history())


# -- request timeouts ----------------------------------------------------------------------------

def test_request_timeout(gates):
    fn, _, _, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=50)
    started = time.monotonic()
    r = agent.prompt("go")
    assert time.monotonic() - started < QUICK
    assert r.subtype == "error_timeout" and r.is_error is True
    assert isinstance(r.error, RequestTimeoutError) and isinstance(r.error, TimeoutError)
    assert requests[0].timeout_ms == 50
    assert requests[0].signal.aborted  # fires on timeout
    assert_well_formed(agent.get_history())


def test_request_timeout_per_query_override(gates):
    fn, _, _, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=60_000)
    r = agent.prompt("go", request_timeout_ms=50)
    assert r.subtype == "error_timeout" and requests[0].timeout_ms == 50


def test_request_timeout_unset_means_none():
    agent, client = scripted(["ok"])
    agent.prompt("go")
    assert client.requests[0].timeout_ms is None


def test_request_timeout_is_per_request_not_per_query():
    def slowish(request):
        time.sleep(0.06)
        return reply(tool_use("t", {}, f"t{len(request.messages)}")) if len(request.messages) < 5 \
            else reply("done")

    agent, client = function_agent(slowish, request_timeout_ms=1000,
                                   tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    assert agent.prompt("go").subtype == "success"
    assert len(client.requests) == 3


@pytest.mark.parametrize("value", [0, -1, True, False, 2.5, "100"])
def test_bad_request_timeout_per_query(value):
    agent, client = scripted(["ok"])
    with pytest.raises(ValueError, match="request_timeout_ms"):
        agent.prompt("go", request_timeout_ms=value)
    with pytest.raises(ValueError, match="request_timeout_ms"):
        run(agent, "go", request_timeout_ms=value)
    assert client.requests == []
    assert agent.prompt("go").result == "ok"


def test_client_raising_request_timeout_is_error_timeout():
    def fn(request):
        raise RequestTimeoutError("gave up")

    agent, _ = function_agent(fn)
    r = agent.prompt("go")
    assert r.subtype == "error_timeout" and isinstance(r.error, RequestTimeoutError)


# -- well-formed history after every ending ------------------------------------------------------

def test_well_formed_after_end_turn_and_errors():
    fin = Tool("fin", "F.", {"type": "object"}, lambda i: ToolResult("bye", end_turn=True))
    agent, _ = scripted([reply(tool_use("fin", {}, "1"), tool_use("missing", {}, "2"))], tools=[fin])
    assert agent.prompt("go").result == "bye"
    assert_well_formed(agent.get_history())


def test_tool_context_type_annotation_works_with_decorator():
    @lattice.tool
    def check(ctx: ToolContext) -> str:
        """Check."""
        return type(ctx.signal).__name__

    agent, _ = scripted([reply(tool_use("check", {}, "1")), "done"], tools=[check])
    agent.prompt("go")
    assert result_text(results_of(agent.get_history()[2])[0]) == "AbortSignal"


# -- more fine print -----------------------------------------------------------------------------

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
    assert_well_formed(agent.get_history())


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
    assert_well_formed(history)
    [block] = results_of(history[2])
    assert block.get("is_error") is True and "not run" in result_text(block).lower()


def test_signal_bounds_the_whole_query_not_each_request():
    def fn(request):
        time.sleep(0.03)
        return reply(tool_use("t", {}, f"t{len(request.messages)}"))

    agent, client = function_agent(fn, tools=[Tool("t", "T.", {"type": "object"},
                                                   lambda i: "x")])
    r = agent.prompt("go", signal=AbortSignal.timeout(150))
    assert r.subtype == "error_abort" and 2 <= len(client.requests) < 40
    assert_well_formed(agent.get_history())


def test_late_reply_after_timeout_never_enters_history(gates):
    fn, _, release, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=50)
    r = agent.prompt("go")
    assert r.subtype == "error_timeout" and r.result is None and r.num_turns <= 1
    release.set()
    deadline = time.monotonic() + LONG
    while "returned" not in requests and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    assert agent.get_history() == [{"role": "user", "content": "go"}]


def test_result_text_none_when_no_reply():
    controller = AbortController()
    controller.abort()
    agent, _ = scripted(["never"])
    r = agent.prompt("go", signal=controller.signal)
    assert r.result is None and r.num_turns == 0


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


@pytest.mark.parametrize("fail_at", [2, 3])
def test_store_failure_mid_query_leaves_well_formed_history(fail_at):
    from lattice import HistoryStoreError, define_history_store

    count = []

    def append(message):
        count.append(message)
        if len(count) == fail_at:
            raise OSError("disk gone")

    agent, _ = scripted([reply(tool_use("t", {}, "1")), "done", "after"],
                        tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")],
                        history_store=define_history_store(append=append, fail_on_error=True))
    with pytest.raises(HistoryStoreError):
        agent.prompt("go")
    assert_well_formed(agent.get_history())


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


def test_threading_event_fires_tool_context_signal():
    event, seen = threading.Event(), []

    def patient(_input, context):
        event.set()
        deadline = time.monotonic() + LONG
        while not context.signal.aborted and time.monotonic() < deadline:
            time.sleep(0.005)
        seen.append(context.signal.aborted)
        return "x"

    agent, _ = scripted([reply(tool_use("p", {}, "1"))],
                        tools=[Tool("p", "P.", {"type": "object"}, patient)])
    assert agent.prompt("go", signal=event).subtype == "error_abort"
    deadline = time.monotonic() + LONG
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)
    assert seen == [True]
