"""SPEC section 5: abort, request timeouts, interrupt; with clients and tools that ignore
cancellation entirely. Bounds are wide (seconds), the asserted behaviour is exact."""
import threading
import time

import pytest
from helpers import WAIT_S, join_lattice_threads, lattice_threads, reply, tool_use

from lattice import (
    AbortController,
    AbortError,
    AbortSignal,
    Agent,
    RequestTimeoutError,
    Tool,
)
from lattice.testing import (
    FunctionModelClient,
    MockMessagesServer,
    ScriptedModelClient,
    assert_well_formed,
)

FOREVER = 30  # a hung client/tool sleeps this long; tests must finish far sooner


def hung_client(started=None):
    def fn(request):
        if started is not None:
            started.set()
        time.sleep(FOREVER)
        return "too late"
    return fn


def test_abort_signal_basics():
    controller = AbortController()
    seen = []
    controller.signal.add_callback(lambda: seen.append(1))
    assert not controller.signal.aborted
    controller.abort("why")
    controller.abort("again")
    assert controller.signal.aborted and controller.signal.reason == "why" and seen == [1]
    assert controller.signal.wait(0)
    late = []
    controller.signal.add_callback(lambda: late.append(1))
    assert late == [1]
    with pytest.raises(AbortError):
        controller.signal.throw_if_aborted()
    assert AbortSignal.timeout(20).wait(5)
    with pytest.raises(ValueError):
        AbortSignal.timeout(-1)


def test_abort_during_hung_model_call_returns_promptly():
    started = threading.Event()
    controller = AbortController()
    agent = Agent(model="m", model_client=hung_client(started))
    threading.Thread(target=lambda: (started.wait(5), controller.abort())).start()
    t0 = time.monotonic()
    result = agent.prompt("x", signal=controller.signal)
    assert time.monotonic() - t0 < 2
    assert result.subtype == "error_abort" and result.is_error
    assert isinstance(result.error, AbortError)
    assert_well_formed(agent.get_history())


def test_already_aborted_signal_makes_no_request():
    client = ScriptedModelClient(["never"])
    controller = AbortController()
    controller.abort()
    result = Agent(model="m", model_client=client).prompt("x", signal=controller.signal)
    assert result.subtype == "error_abort" and client.requests == []


def test_threading_event_is_accepted_as_signal():
    started = threading.Event()
    event = threading.Event()
    agent = Agent(model="m", model_client=hung_client(started))
    threading.Thread(target=lambda: (started.wait(5), event.set())).start()
    t0 = time.monotonic()
    result = agent.prompt("x", signal=event)
    assert result.subtype == "error_abort" and time.monotonic() - t0 < 2


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


def test_signal_timeout_bounds_the_whole_query():
    agent = Agent(model="m", model_client=hung_client())
    t0 = time.monotonic()
    result = agent.prompt("x", signal=AbortSignal.timeout(100))
    assert result.subtype == "error_abort" and time.monotonic() - t0 < 2


def test_request_timeout_ends_with_error_timeout_and_late_reply_never_enters():
    release = threading.Event()

    def slow(request):
        release.wait(5)
        return "late reply"

    earlier = set(lattice_threads())  # hung workers other tests abandoned
    agent = Agent(model="m", model_client=slow, request_timeout_ms=50)
    t0 = time.monotonic()
    result = agent.prompt("x")
    assert time.monotonic() - t0 < 2
    assert result.subtype == "error_timeout" and result.is_error
    assert isinstance(result.error, RequestTimeoutError) and isinstance(result.error, TimeoutError)
    release.set()
    join_lattice_threads(earlier)  # the late reply has come back, and been dropped
    assert [m["role"] for m in agent.get_history()] == ["user"]


def test_request_timeout_per_query_override_and_is_per_request():
    delays = [0.05, 0.05, 0.05]

    def fn(request):
        time.sleep(delays.pop(0))
        assert request.timeout_ms == 1000
        return reply(tool_use("t", {}, f"t{len(delays)}")) if delays else "done"

    agent = Agent(model="m", model_client=fn, request_timeout_ms=10,
                  tools=[Tool("t", "T.", {"type": "object"}, lambda a: "ok")])
    # each request takes 50 ms, the query far more than 10 ms: the override applies per request
    assert agent.prompt("x", request_timeout_ms=1000).result == "done"


def test_client_raising_timeout_is_error_timeout():
    def fn(request):
        raise RequestTimeoutError("client gave up")

    result = Agent(model="m", model_client=fn).prompt("x")
    assert result.subtype == "error_timeout" and str(result.error) == "client gave up"


def test_request_signal_and_timeout_passed_to_client():
    seen = {}

    def fn(request):
        seen["signal"] = request.signal
        seen["timeout"] = request.timeout_ms
        request.signal.wait(5)  # a cooperative client stops when told
        return "late"

    agent = Agent(model="m", model_client=fn, request_timeout_ms=80)
    assert agent.prompt("x").subtype == "error_timeout"
    assert seen["timeout"] == 80 and isinstance(seen["signal"], AbortSignal)
    assert seen["signal"].aborted and isinstance(seen["signal"].reason, RequestTimeoutError)


def test_request_signal_is_a_signal_without_query_signal():
    seen = []
    Agent(model="m", model_client=lambda r: seen.append(r.signal) or "ok").prompt("x")
    assert isinstance(seen[0], AbortSignal) and not seen[0].aborted


def test_interrupt_during_model_request():
    started = threading.Event()
    agent = Agent(model="m", model_client=hung_client(started))
    threading.Thread(target=lambda: (started.wait(5), agent.interrupt())).start()
    t0 = time.monotonic()
    result = agent.prompt("x")
    assert result.subtype == "interrupted" and result.is_error is False
    assert time.monotonic() - t0 < 2
    assert [m["role"] for m in agent.get_history()] == ["user"]


def test_interrupt_during_tool_batch_lets_batch_finish():
    entered, release = threading.Event(), threading.Event()
    seen_signal = []

    def work(args, context):
        entered.set()
        release.wait(5)
        seen_signal.append(context.signal.aborted)
        return "finished"

    client = ScriptedModelClient([reply(tool_use("work", {}, "t1")), "never asked"])
    agent = Agent(model="m", model_client=client,
                  tools=[Tool("work", "W.", {"type": "object"}, work)])

    def interrupter():
        entered.wait(5)
        agent.interrupt()
        release.set()

    threading.Thread(target=interrupter).start()
    result = agent.prompt("x")
    assert result.subtype == "interrupted"
    assert len(client.requests) == 1 and seen_signal == [True]
    history = agent.get_history()
    assert history[-1]["content"][0]["content"] == "finished"
    assert_well_formed(history)


def test_interrupt_while_consumer_holds_assistant_message():
    ran = []
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(tool_use("t", {}, "t1")), "next"]),
                  tools=[Tool("t", "T.", {"type": "object"}, lambda a: ran.append(1) or "ran")])
    messages = []
    for message in agent.query("x"):
        messages.append(message)
        if message.type == "assistant":
            agent.interrupt()
    assert ran == [] and messages[-1].subtype == "interrupted"
    assert "interrupted" in agent.get_history()[-1]["content"][0]["content"]
    # the conversation goes on
    assert agent.prompt("go on").result == "next"
    assert_well_formed(agent.get_history())


def test_interrupt_when_idle_is_noop_and_does_not_leak_into_next_query():
    agent = Agent(model="m", model_client=ScriptedModelClient(["ok"]))
    agent.interrupt()
    assert agent.prompt("x").subtype == "success"


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


def test_reused_signal_does_not_pile_up_callbacks():
    controller = AbortController()
    agent = Agent(model="m", model_client=FunctionModelClient(lambda r: "ok"))
    for _ in range(50):
        agent.prompt("x", signal=controller.signal)
    assert len(controller.signal._callbacks) == 0


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


# -- AbortSignal.timeout on its own ----------------------------------------------------------


def test_abort_signal_timeout_fires_by_itself():
    signal = AbortSignal.timeout(30)
    assert signal.aborted is False
    assert signal.wait(10) is True  # fires after 30 ms; 10 s is only the failure bound
    assert signal.aborted is True


# -- abandoned workers are visible (SPEC 16a) ------------------------------------------------
def test_workers_that_ignore_cancellation_are_warned_about_past_ten(gates, monkeypatch,
                                                                      caplog):
    import logging

    from lattice import race

    registry = race._Abandoned()  # this test's count, whatever earlier tests left running
    monkeypatch.setattr(race, "_ABANDONED", registry)
    monkeypatch.setattr(race, "ABANDONED_AFTER_S", 0.2)  # the test need not wait a second

    def stuck_agent():
        gate = gates.new()
        tool = Tool("stuck", "Ignores its signal.", {"type": "object"},
                    lambda args: gate.wait(FOREVER) and "too late")
        client = ScriptedModelClient([reply(tool_use("stuck", id="t1"))])
        return Agent(model="m", model_client=client, tools=[tool]), gate

    def abandon(count):
        for _ in range(count):
            agent, _ = stuck_agent()
            assert agent.prompt("go", signal=AbortSignal.timeout(20)).subtype == "error_abort"

    def warnings():
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "still running" in r.getMessage()]

    def wait_for(count, warned):
        deadline = time.monotonic() + WAIT_S
        while (race.abandoned_workers(), len(warnings())) != (count, warned) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (race.abandoned_workers(), len(warnings())) == (count, warned)

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
    from lattice import race

    registry = race._Abandoned()
    monkeypatch.setattr(race, "_ABANDONED", registry)
    finished = threading.Event()

    def slow(args):  # ignores the signal, but is done well within ABANDONED_AFTER_S
        time.sleep(0.1)
        finished.set()
        return "done"

    tool = Tool("slow", "Slow.", {"type": "object"}, slow)
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(tool_use("slow"))]),
                  tools=[tool])
    assert agent.prompt("go", signal=AbortSignal.timeout(20)).subtype == "error_abort"
    assert finished.wait(WAIT_S)
    # Nothing to wait for but the moment the worker is looked at (a timer), and past it.
    time.sleep(race.ABANDONED_AFTER_S + 0.3)
    assert race.abandoned_workers() == 0 and registry.warned == 0
