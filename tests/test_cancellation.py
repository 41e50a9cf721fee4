"""lattice/cancellation.py: AbortSignal and AbortController, AbortSignal.timeout and
any(), the shared timer thread; signals that outlive queries keep no callbacks."""

from __future__ import annotations

import gc
import threading
from typing import Any, Iterator

import pytest
from helpers import (
    WAIT_S,
    tool_then_text,
    waiting_tool,
)

from lattice import (
    AbortController,
    AbortError,
    AbortSignal,
    Agent,
    Tool,
)
from lattice.cancellation import _Timers
from lattice.testing import (
    FunctionModelClient,
    ScriptedModelClient,
)


def test_abort_signal_and_controller_basics():
    controller = AbortController()
    assert isinstance(controller.signal, AbortSignal) and controller.signal.aborted is False
    seen = []
    controller.signal.add_callback(lambda: seen.append(1))
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


def test_abort_signal_timeout_fires_by_itself():
    signal = AbortSignal.timeout(30)
    assert signal.aborted is False
    assert signal.wait(10) is True  # fires after 30 ms; 10 s is only the failure bound
    assert signal.aborted is True


def test_reused_signal_does_not_pile_up_callbacks():
    controller = AbortController()
    agent = Agent(model="m", model_client=FunctionModelClient(lambda r: "ok"))
    for _ in range(50):
        agent.prompt("x", signal=controller.signal)
    assert len(controller.signal._callbacks) == 0


def test_a_long_lived_signal_keeps_no_callbacks_whatever_the_end(sigint: Any):
    long_lived = AbortController().signal
    started, release = threading.Event(), threading.Event()

    def ends() -> Iterator[str]:
        agent = Agent(model="m", model_client=ScriptedModelClient(["ok"]))
        assert agent.prompt("x", signal=long_lived).subtype == "success"
        yield "success"
        agent = Agent(model="m", model_client=tool_then_text(),
                      tools=[Tool("slow", "T.", {"type": "object"}, lambda a: "x")])
        gen = agent.query("x", signal=long_lived)
        next(gen)
        gen.close()
        yield "closed"
        agent = Agent(model="m", model_client=tool_then_text(),
                      tools=[Tool("slow", "T.", {"type": "object"}, lambda a: "x")])
        for message in agent.query("x", signal=long_lived):
            if message.type == "assistant":
                agent.interrupt()
        assert message.subtype == "interrupted"
        yield "interrupted"
        agent = Agent(model="m", model_client=lambda r: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            agent.prompt("x", signal=long_lived)
        yield "exception"
        agent = Agent(model="m", model_client=tool_then_text(),
                      tools=[waiting_tool(started, release)])
        killer = threading.Thread(target=lambda: started.wait(WAIT_S) and sigint())
        killer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                agent.prompt("x", signal=long_lived)
        finally:
            release.set()
            killer.join()
        yield "keyboard interrupt"

    for end in ends():
        assert long_lived._callbacks == [], end


def test_any_leaves_no_callbacks_on_a_long_lived_signal():
    """Fix: ``AbortSignal.any`` links its sources to the combined signal through a weak
    reference and removes the links when the combined signal fires or is collected."""
    shutdown = AbortController().signal
    agent = Agent(model="m", model_client=lambda request: "ok")
    before = set(threading.enumerate())
    for _ in range(20):
        agent.prompt("x", signal=AbortSignal.any([shutdown, AbortSignal.timeout(600_000)]))
    for worker in set(threading.enumerate()) - before:
        worker.join(WAIT_S)  # a worker still unwinding holds its query's signal
    per_call = AbortController()
    combined = AbortSignal.any([shutdown, per_call.signal])
    per_call.abort()
    assert combined.aborted
    gc.collect()
    assert shutdown._callbacks == [] and per_call.signal._callbacks == []


def test_a_timer_callback_raising_base_exception_does_not_stop_the_timers():
    """Fix: ``_Timers._serve`` catches ``BaseException`` (logged), not only ``Exception``:
    the timer thread has no one to raise to, and every deadline in the process needs it."""
    timers = _Timers()  # a private one: no other test can restart its thread
    fired = threading.Event()
    timers.schedule(0.05, fired.set)

    def leave() -> None:
        raise SystemExit  # e.g. an abort callback that calls sys.exit()

    timers.schedule(0.0, leave)
    assert fired.wait(3.0)  # due in 50 ms
