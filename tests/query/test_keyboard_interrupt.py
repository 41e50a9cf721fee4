"""Ctrl-C in the consumer: a KeyboardInterrupt while prompt()/query() waits is raised
there, the late reply stays out, and the Agent stays usable."""

from __future__ import annotations

import _thread
import threading
from typing import Any, List

import pytest
from helpers import (
    WAIT_S,
    assert_usable,
    keyboard_interrupt,
    on_call,
    tool_then_text,
    waiting_tool,
)

from lattice import (
    Agent,
    ConcurrentQueryError,
)
from lattice.query.race import QueryRace
from lattice.testing import ScriptedModelClient, assert_well_formed


@pytest.mark.parametrize("how", ["prompt", "query"])
def test_ctrl_c_while_waiting_propagates_and_leaves_the_agent_usable(sigint: Any, how: str):
    started, release = threading.Event(), threading.Event()
    agent = Agent(model="m", model_client=tool_then_text(),
                  tools=[waiting_tool(started, release)])
    killer = threading.Thread(target=lambda: started.wait(WAIT_S) and sigint())
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            if how == "prompt":
                agent.prompt("go")
            else:
                for _ in agent.query("go"):
                    pass
    finally:
        release.set()
        killer.join()
    history = agent.get_history()
    assert_well_formed(history)
    assert history[-1]["content"][0]["tool_use_id"] == "t1"
    assert "caller stopped the query" in history[-1]["content"][0]["content"]
    assert_usable(agent)


def test_ctrl_c_while_the_model_is_slow_keeps_the_late_reply_out(sigint: Any):
    entered, release = threading.Event(), threading.Event()
    workers: List[threading.Thread] = []

    def slow(request: Any) -> str:
        workers.append(threading.current_thread())
        entered.set()
        release.wait(WAIT_S)
        return "late"

    agent = Agent(model="m", model_client=slow, request_timeout_ms=600_000)
    killer = threading.Thread(target=lambda: entered.wait(WAIT_S) and sigint())
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.prompt("go")
    finally:
        release.set()
        killer.join()
    workers[0].join(WAIT_S)
    assert [m["role"] for m in agent.get_history()] == ["user"]  # no late reply
    agent._settings.client = ScriptedModelClient(["fine"])
    assert_usable(agent)


def test_interrupt_main_is_raised_when_the_consumer_wakes(sigint: Any):
    """``_thread.interrupt_main()`` only sets the flag (no OS signal): the consumer, blocked
    in a lock, sees it when it is woken, still inside prompt()."""
    started, release = threading.Event(), threading.Event()

    def trip() -> None:
        started.wait(WAIT_S)
        _thread.interrupt_main()
        release.set()

    agent = Agent(model="m", model_client=tool_then_text(),
                  tools=[waiting_tool(started, release)])
    tripper = threading.Thread(target=trip)
    tripper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.prompt("go")
    finally:
        release.set()
        tripper.join()
    assert_usable(agent)


def test_ctrl_c_as_the_guard_is_released_still_releases_it():
    """Fix: ``Agent._release`` releases the guard (and clears ``_run``) in a ``finally``
    around ``run.release()``."""
    agent = Agent(model="m", model_client=ScriptedModelClient(["one", "fine"]))
    with pytest.raises(KeyboardInterrupt), on_call(QueryRace.release, keyboard_interrupt):
        agent.prompt("a")
    try:
        assert_usable(agent)
    except ConcurrentQueryError:
        pytest.fail("the guard was never released")
