"""Reliability: Ctrl-C in the consumer, the guard on every way out, interrupts racing a
query's start and end, leaks, late writes, and store races.

Every test waits on events, not on sleeps; the few time bounds are wide (seconds, where
the behaviour under test takes milliseconds). Several reproduce problems found in a
reliability pass and fixed since; they would fail again if the fix were undone.
"""

from __future__ import annotations

import _thread
import gc
import os
import signal
import sqlite3
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List

import pytest
from helpers import reply, tool_use

from lattice import (
    AbortController,
    AbortSignal,
    Agent,
    ConcurrentQueryError,
    HistoryStoreError,
    Tool,
    ToolContext,
    define_history_store,
)
from lattice.cancellation import _Timers, call_later
from lattice.query import Query
from lattice.race import QueryRun
from lattice.stores import SqliteHistoryStore
from lattice.testing import ScriptedModelClient, assert_well_formed

WAIT_S = 10.0  # how long a test waits for something that takes milliseconds


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


@contextmanager
def on_call(function: Callable[..., Any], action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` when ``function`` is next called in this thread: an exception it
    raises is raised at that call, the way a Ctrl-C landing there would be."""
    code = function.__code__
    pending = [True]

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and pending[0]:
            pending[0] = False
            action()

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)
    assert not pending[0], f"{function.__qualname__} was not called"


def keyboard_interrupt() -> None:
    raise KeyboardInterrupt


def blocking_tool(started: threading.Event, release: threading.Event) -> Tool:
    def handler(args: Any) -> str:
        started.set()
        release.wait(WAIT_S)
        return "tool done"

    return Tool("slow", "A slow tool.", {"type": "object"}, handler)


def tool_then_text(text: str = "fine") -> ScriptedModelClient:
    return ScriptedModelClient([reply(tool_use("slow", {}, "t1")), text, text, text])


def assert_usable(agent: Agent, expected: str = "fine") -> None:
    """The guard is free and the conversation continues."""
    assert agent._run is None
    assert_well_formed(agent.get_history())
    result = agent.prompt("and now?")
    assert result.subtype == "success" and result.result == expected
    assert_well_formed(agent.get_history())


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


class Fatal(BaseException):
    """Not an Exception: what a tool or client calling sys.exit() looks like."""


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
    with on_call(Query._release, agent.interrupt):
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


# -- library bugs found in this pass (strict xfail until fixed) ------------------------------


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
    """Fix: in ``Agent._iterate``, create the ``QueryRun`` and set ``self._run`` right after
    taking the guard, before ``self._ensure_loaded()``."""
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
        seen.append((weakref.ref(agent._run), threading.current_thread()))
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
        while not controller.signal.aborted:
            time.sleep(0.005)
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


# -- SQLite store: first use of a new file from many connections ----------------------------


def test_sqlite_store_waits_for_a_writer_on_a_new_file(tmp_path):
    """A new file is still in rollback-journal mode: while another connection writes,
    ``PRAGMA journal_mode = WAL`` fails at once (no busy wait). The store retries."""
    path = tmp_path / "h.db"
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    committer = threading.Timer(0.2, lambda: other.execute("COMMIT"))
    committer.start()
    store = SqliteHistoryStore(path, "s")
    try:
        store.append({"role": "user", "content": "hi"})
        assert store.load() == [{"role": "user", "content": "hi"}]
    finally:
        committer.join()
        other.close()
        store.close()


def test_sqlite_many_threads_opening_a_new_file_together(tmp_path):
    for round_ in range(10):
        path = tmp_path / f"{round_}.db"
        barrier = threading.Barrier(12)
        errors: List[BaseException] = []

        def first_use(n: int) -> None:
            store = SqliteHistoryStore(path, f"s{n}")
            try:
                barrier.wait(WAIT_S)
                store.append({"role": "user", "content": str(n)})
            except BaseException as exc:  # noqa: B036 - reported below
                errors.append(exc)
            finally:
                store.close()

        threads = [threading.Thread(target=first_use, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(SqliteHistoryStore(path, "s0").list_sessions()) == 12
    assert os.listdir(tmp_path)
