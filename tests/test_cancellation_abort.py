"""SPEC conformance: one query at a time, guard timing, well-formed history (section 3),
time limits and cancellation (section 5)."""

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
    run,
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
from lattice.testing import assert_well_formed

# -- one query at a time -------------------------------------------------------------------------


# -- interrupt ----------------------------------------------------------------------------------


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
    assert_well_formed(json_copy(agent.get_history()))


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
    assert_well_formed(json_copy(agent.get_history()))


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
    # Three requests of 0.2 s under a 0.5 s timeout: each fits with 0.3 s to spare, while the
    # query (0.6 s) outlives it, so a per-query deadline would end it as error_timeout.
    def slowish(request):
        time.sleep(0.2)  # the model's own slowness, which the timeout measures: not a wait
        return reply(tool_use("t", {}, f"t{len(request.messages)}")) if len(request.messages) < 5 \
            else reply("done")

    agent, client = function_agent(slowish, request_timeout_ms=500,
                                   tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    started = time.monotonic()
    assert agent.prompt("go").subtype == "success"
    assert len(client.requests) == 3 and time.monotonic() - started > 0.5


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


# -- more fine print -----------------------------------------------------------------------------


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


def test_signal_bounds_the_whole_query_not_each_request():
    def fn(request):
        time.sleep(0.03)  # slow model work, that the signal's 150 ms must cut: not a wait
        return reply(tool_use("t", {}, f"t{len(request.messages)}"))

    agent, client = function_agent(fn, tools=[Tool("t", "T.", {"type": "object"},
                                                   lambda i: "x")])
    r = agent.prompt("go", signal=AbortSignal.timeout(150))
    assert r.subtype == "error_abort" and 2 <= len(client.requests) < 40
    assert_well_formed(json_copy(agent.get_history()))


def test_late_reply_after_timeout_never_enters_history(gates):
    before = set(lattice_threads())
    fn, _, release, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=50)
    r = agent.prompt("go")
    assert r.subtype == "error_timeout" and r.result is None and r.num_turns <= 1
    release.set()
    join_lattice_threads(before, LONG)  # the worker has taken the late reply (and dropped it)
    assert agent.get_history() == [{"role": "user", "content": "go"}]


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
