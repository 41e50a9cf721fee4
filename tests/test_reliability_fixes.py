"""Reliability fixes, one test each: signal callbacks that raise, interrupts while the history
loads or as the guard is released, long-lived signals and deadlines that leak nothing, a slow
store that must not stall other agents' deadlines, the timer thread surviving BaseException.

Each reproduces a problem found in a reliability pass and fixed since; it would fail again
if the fix were undone. Every test waits on events; the few time bounds are wide.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any, List

import pytest
from helpers import (
    WAIT_S,
    Fatal,
    assert_usable,
    keyboard_interrupt,
    on_call,
    reply,
    tool_then_text,
    tool_use,
)

from lattice import (
    AbortController,
    AbortSignal,
    Agent,
    ConcurrentQueryError,
    Tool,
    ToolContext,
    define_history_store,
)
from lattice.cancellation import _Timers, call_later
from lattice.race import QueryRun
from lattice.testing import ScriptedModelClient


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


def test_abort_reaches_the_query_past_a_raising_callback():
    """Fix: ``AbortSignal._fire`` isolates callbacks (see above)."""
    entered, release = threading.Event(), threading.Event()

    def hang(request: Any) -> str:
        entered.set()
        release.wait(WAIT_S)
        return "late"

    controller = AbortController()
    controller.signal.add_callback(lambda: 1 / 0)  # the caller's own, registered first
    agent = Agent(model="m", model_client=hang)
    out: List[Any] = []
    runner = threading.Thread(target=lambda: out.append(
        agent.prompt("go", signal=controller.signal)))
    runner.start()
    try:
        assert entered.wait(WAIT_S)
        try:
            controller.abort()
        except ZeroDivisionError:  # the callbacks after it (the query's) never ran
            pytest.fail("abort() stopped at the caller's failing callback")
        runner.join(WAIT_S)
        assert out and out[0].subtype == "error_abort"
    finally:
        release.set()
        runner.join(WAIT_S)


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


def test_ctrl_c_as_the_guard_is_released_still_releases_it():
    """Fix: ``Agent._release`` releases the guard (and clears ``_run``) in a ``finally``
    around ``run.release()``."""
    agent = Agent(model="m", model_client=ScriptedModelClient(["one", "fine"]))
    with pytest.raises(KeyboardInterrupt), on_call(QueryRun.release, keyboard_interrupt):
        agent.prompt("a")
    try:
        assert_usable(agent)
    except ConcurrentQueryError:
        pytest.fail("the guard was never released")


def test_a_base_exception_in_a_parallel_tool_is_raised_as_in_sequence():
    """Fix: ``Loop.run_parallel``'s ``work`` catches ``BaseException`` into a list; after
    the joins the worker raises the first one (as ``run_one`` in sequence would)."""

    def bad(args: Any) -> str:
        raise Fatal("boom")

    uses = [tool_use("ok", {}, "t1"), tool_use("bad", {}, "t2")]
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(*uses), "fine"]),
                  parallel_tool_calls=True,
                  tools=[Tool("ok", "Ok.", {"type": "object"}, lambda a: "ok"),
                         Tool("bad", "Bad.", {"type": "object"}, bad)])
    with pytest.raises(Fatal):
        agent.prompt("go")
    assert_usable(agent)


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


def test_an_ended_query_leaves_no_request_deadline_behind():
    """Fix: ``QueryRun.release`` cancels a pending request deadline (swap
    ``_request_done`` for ``_nothing`` under ``cond`` and call it); ``start_model`` stores
    ``_request_done`` under ``cond`` and cancels at once if the query already ended."""
    entered, release = threading.Event(), threading.Event()
    seen: List[Any] = []

    def slow(request: Any) -> str:
        seen.append((weakref.ref(agent._conversation.run), threading.current_thread()))
        entered.set()
        release.wait(WAIT_S)
        return "late"

    agent = Agent(model="m", model_client=slow, request_timeout_ms=600_000)
    controller = AbortController()
    threading.Thread(target=lambda: entered.wait(WAIT_S) and controller.abort()).start()
    assert agent.prompt("go", signal=controller.signal).subtype == "error_abort"
    release.set()
    run, worker = seen[0]
    worker.join(WAIT_S)
    gc.collect()
    assert run() is None, "the run is kept alive (by its 10-minute deadline timer)"


def test_a_slow_store_does_not_stall_other_agents_deadlines():
    """Fix: ``QueryRun.commit`` runs ``write()`` outside ``cond`` (a ``writing`` count taken
    under it); ``next_item`` and ``_repair_tail`` wait while ``writing``; ``_repair_tail``
    appends to the history after leaving ``cond``."""
    in_store, unblock = threading.Event(), threading.Event()
    controller = AbortController()
    aborted = threading.Event()
    controller.signal.add_callback(aborted.set)

    def append(message: Any) -> None:
        if message["role"] == "assistant":
            # The caller's signal fires on the shared timer thread during this write.
            call_later(0.01, controller.abort)
            in_store.set()
            unblock.wait(WAIT_S)

    slow_agent = Agent(model="m", model_client=lambda r: "reply",
                       history_store=define_history_store(append=append))
    first = threading.Thread(target=lambda: slow_agent.prompt("x", signal=controller.signal))
    first.start()
    hang = threading.Event()
    other = Agent(model="m", model_client=lambda r: hang.wait(WAIT_S) and "late",
                  request_timeout_ms=100)
    out: List[Any] = []
    second = threading.Thread(target=lambda: out.append(other.prompt("y")))
    try:
        assert in_store.wait(WAIT_S)
        assert aborted.wait(WAIT_S)
        second.start()
        second.join(3.0)  # the deadline is 100 ms
        assert out and out[0].subtype == "error_timeout", "the other agent's deadline stalled"
    finally:
        unblock.set()
        hang.set()
        first.join(WAIT_S)
        second.join(WAIT_S)


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
