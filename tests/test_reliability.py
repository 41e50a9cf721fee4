"""Reliability: Ctrl-C in the consumer, the guard on every way out, interrupts racing a
query's start and end, leaks, late writes, and store races.

Every test waits on events, not on sleeps; the few time bounds are wide (seconds, where
the behaviour under test takes milliseconds). Several reproduce problems found in a
reliability pass and fixed since; they would fail again if the fix were undone.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from typing import Any, Callable, Iterator, List

import pytest
from helpers import (
    WAIT_S,
    Fatal,
    assert_usable,
    on_call,
    tool_then_text,
)

from lattice import (
    AbortController,
    Agent,
    HistoryStoreError,
    Tool,
    define_history_store,
)
from lattice.conversation import Conversation
from lattice.testing import ScriptedModelClient, assert_well_formed

# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def sigint() -> Iterator[Callable[[], None]]:
    """A function that presses Ctrl-C once: a real SIGINT to the main thread, whose handler
    raises one KeyboardInterrupt.

    A signal that lands just before the main thread blocks in a lock is only handled once
    that lock is released (CPython runs handlers between bytecodes, and only an interrupted
    wait gets to them): so the signal is sent again every 20 ms until the handler has run,
    and the handler raises only the first time, like a single key press.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "pthread_kill"):
        pytest.skip("needs the main thread and pthread_kill")
    main = threading.main_thread().ident
    assert main is not None
    pressed = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if not pressed.is_set():
            pressed.set()
            raise KeyboardInterrupt

    def press() -> None:
        deadline = time.monotonic() + WAIT_S
        while not pressed.is_set() and time.monotonic() < deadline:
            signal.pthread_kill(main, signal.SIGINT)
            pressed.wait(0.02)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield press
    finally:
        time.sleep(0.01)  # a last signal in flight meets the handler that ignores it
        signal.signal(signal.SIGINT, previous)


def blocking_tool(started: threading.Event, release: threading.Event) -> Tool:
    def handler(args: Any) -> str:
        started.set()
        release.wait(WAIT_S)
        return "tool done"

    return Tool("slow", "A slow tool.", {"type": "object"}, handler)


# -- KeyboardInterrupt in the consumer ---------------------------------------------------------


@pytest.mark.parametrize("how", ["prompt", "query"])
def test_ctrl_c_while_waiting_propagates_and_leaves_the_agent_usable(sigint: Any, how: str):
    started, release = threading.Event(), threading.Event()
    agent = Agent(model="m", model_client=tool_then_text(),
                  tools=[blocking_tool(started, release)])
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
                  tools=[blocking_tool(started, release)])
    tripper = threading.Thread(target=trip)
    tripper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.prompt("go")
    finally:
        release.set()
        tripper.join()
    assert_usable(agent)


# -- the guard on every way out ------------------------------------------------------------------


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
                      tools=[blocking_tool(started, release)])
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


