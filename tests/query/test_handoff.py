"""The lockstep handoff (lattice/query/handoff.py): the doorbells of every kind, and many short
queries ended at random points from every side, each ending promptly and well-formed (a
lost wake-up would hang one)."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest
from helpers import (
    WAIT_S,
    in_thread,
    join_lattice_threads,
    lattice_threads,
    reply,
    scripted,
    tool_use,
)

from lattice import AbortController, Agent, Tool, tool
from lattice.query import handoff as handoff_module
from lattice.query.endings import Ending
from lattice.query.handoff import Doorbell, FdDoorbell, fast_doorbell
from lattice.query.race import QueryRace, Stopped
from lattice.testing import FunctionModelClient, assert_well_formed

ENDINGS = ["lock", "eventfd", "pipe"]


def make_bell(kind: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """A factory of doorbells of ``kind`` (skips where the system has none)."""
    if kind == "lock":
        return Doorbell
    if os.name != "posix":
        pytest.skip("fd doorbells are POSIX only")
    if kind == "eventfd" and not hasattr(os, "eventfd"):
        pytest.skip("no os.eventfd (Linux, Python 3.10+)")
    monkeypatch.setattr(FdDoorbell, "use_eventfd", kind == "eventfd")
    return FdDoorbell


@pytest.fixture(params=ENDINGS)
def bells(request: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """Doorbells of one kind; query() uses that kind too while the test runs."""
    factory = make_bell(request.param, monkeypatch)
    monkeypatch.setattr(handoff_module, "fast_doorbell", factory)
    return factory


# -- the doorbells ---------------------------------------------------------------------------


def test_a_ring_before_the_wait_is_kept_until_taken(bells):
    bell = bells()
    assert not bell.wait(0.01)  # nobody rang
    bell.ring()
    assert bell.wait(0) and not bell.wait(0.01)  # taken by the first wait


def test_ringing_never_blocks_however_often_nobody_takes_it(bells):
    bell = bells()
    for _ in range(100_000):  # far more than a pipe holds
        bell.ring()
    assert bell.wait(0)


def test_a_ring_from_another_thread_wakes_the_sleeper(bells):
    bell, woke = bells(), threading.Event()
    in_thread(lambda: bell.wait() and woke.set())
    bell.ring()
    assert woke.wait(WAIT_S)


@contextlib.contextmanager
def pressing(handler: Callable[[], None], last: Callable[[], None]) -> Iterator[None]:
    """While the block runs: SIGUSR1 to the main thread every 20 ms, handled by ``handler``;
    after ``WAIT_S``, ``last()`` instead (so that a failing test fails, not hangs)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
            signal, "pthread_kill"):
        pytest.skip("needs the main thread and pthread_kill")
    main, done = threading.main_thread().ident, threading.Event()

    def press() -> None:
        deadline = time.monotonic() + WAIT_S
        while not done.is_set() and time.monotonic() < deadline:
            signal.pthread_kill(main, signal.SIGUSR1)
            done.wait(0.02)
        if not done.is_set():
            last()

    old = signal.signal(signal.SIGUSR1, lambda signum, frame: handler())
    presser = in_thread(press)
    try:
        yield
    finally:
        done.set()
        presser.join(WAIT_S)
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # one still in flight
        signal.signal(signal.SIGUSR1, old)


def test_a_signal_during_the_sleep_is_handled_and_a_handler_may_ring(bells):
    """A handler that returns (the CLI's calls interrupt()) leaves the sleeper sleeping or
    waking early, never raising; one that rings (interrupt() ending the query) wakes it."""
    bell, calls, late = bells(), [], []

    def handler() -> None:
        calls.append(1)
        if len(calls) >= 3:  # the first ones land in the sleep, and only return
            bell.ring()

    with pressing(handler, lambda: late.append(1) or bell.ring()):
        while len(calls) < 3 and not late:
            bell.wait()  # may wake early (a signal): then it looks and sleeps again
    assert len(calls) >= 3 and not late


def test_a_handler_that_raises_ends_the_sleep_with_its_exception(bells):
    bell, armed, late = bells(), [], []

    def handler() -> None:
        if armed == [1]:  # once, like one key press, and only inside pytest.raises
            armed.append(2)
            raise KeyboardInterrupt

    with pressing(handler, lambda: late.append(1) or bell.ring()):
        with pytest.raises(KeyboardInterrupt):
            armed.append(1)
            while not late:
                bell.wait()
    assert not late


def open_fds() -> int:
    for path in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(path):
            return len(os.listdir(path))
    pytest.skip("cannot count open file descriptors here")


@pytest.mark.parametrize("kind", ["eventfd", "pipe"])
def test_fd_doorbells_close_their_descriptors_once_garbage(kind, monkeypatch):
    factory = make_bell(kind, monkeypatch)
    before = open_fds()
    for _ in range(2000):
        factory().ring()
    assert open_fds() < before + 50


def test_without_descriptors_to_spare_the_bell_is_a_lock(monkeypatch):
    def no_more(*args: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    for name in ("eventfd", "pipe"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, no_more)
    for use_eventfd in (True, False) if hasattr(os, "eventfd") else (False,):  # 3.10+
        monkeypatch.setattr(FdDoorbell, "use_eventfd", use_eventfd)
        assert type(fast_doorbell()) is Doorbell


def test_query_descriptors_do_not_pile_up():
    """A finished query() drops its doorbells at once (no cycle keeps them for the GC)."""
    import gc

    list(tool_agent(2).query("warm up"))
    gc.collect()
    before = open_fds()
    gc.disable()
    try:
        for _ in range(300):
            assert list(tool_agent(2).query("go"))[-1].subtype == "success"
    finally:
        gc.enable()
    assert open_fds() < before + 50


# -- QueryRun's lockstep, driven directly ------------------------------------------------------


def lockstep_run(rng: random.Random, how: str) -> Dict[str, Any]:
    """One run driven from three threads: a worker handing over 20 items (and 7 stream
    events), a consumer taking them, and maybe an end from a third thread at a random
    moment or from the consumer; what each side saw, or "hung"."""
    run = QueryRace(None, lockstep=True)
    seen: Dict[str, Any] = {"taken": 0}

    def worker() -> None:
        try:
            for i in range(20):
                if i % 3 == 0:
                    run.emit(("event", i))
                run.commit(None, lambda: None, ("item", i))
            run.end(Ending("success"))
            seen["worker"] = "finished"
        except Stopped:
            seen["worker"] = "stopped"

    def consumer() -> None:
        while run.next_item() is not None:
            seen["taken"] += 1
            if how == "consumer closes" and rng.random() < 0.1:
                run.end(Ending("closed"))
        seen["consumer"] = "done"

    delay = rng.random() * 0.002
    threads = [in_thread(worker), in_thread(consumer)]
    if how == "third thread ends":
        threads.append(in_thread(lambda: time.sleep(delay) or run.end(Ending("interrupted"))))
    for thread in threads:
        thread.join(WAIT_S)
    if any(thread.is_alive() for thread in threads):
        run.end(Ending("closed"))  # let them go: the test fails anyway
        return {"hung": seen}
    return seen


def test_lockstep_runs_ended_at_random_points_never_hang(bells):
    """A lost wake-up would leave a side asleep: a run that nobody ends never finishes."""
    rng = random.Random(28)
    for n in range(300):
        how = rng.choice(["nobody ends", "third thread ends", "consumer closes"])
        seen = lockstep_run(rng, how)
        assert "hung" not in seen, f"run {n} ({how}): a side never woke: {seen}"
        assert seen["consumer"] == "done" and seen["worker"] in ("finished", "stopped")
        if how == "nobody ends":
            assert seen == {"taken": 27, "worker": "finished", "consumer": "done"}


def test_the_worker_waits_at_every_yield(bells):
    """SPEC 5: while the consumer holds the reply its batch has not started; while it holds
    the tool results no request was made, and closing there never makes one."""
    ran: List[Any] = []
    act = Tool("act", "A.", {"type": "object"}, lambda args: ran.append(1) or "acted")
    agent, client = scripted([reply(tool_use("act", {}, "a1")), "never asked for"],
                             tools=[act])
    query = agent.query("go")
    assert next(query).type == "assistant"
    assert not threading.Event().wait(0.05) and ran == []  # a worker running ahead would
    assert next(query).type == "user" and ran == [1]
    assert not threading.Event().wait(0.05) and len(client.requests) == 1
    query.close()
    assert len(client.requests) == 1
    assert_well_formed(agent.get_history())


# -- many short queries, from several threads, ended from every side ----------------------------


@tool
def step(n: int) -> str:
    """Advance one step."""
    return f"step {n} done"


def tool_agent(turns: int, **options: Any) -> Agent:
    def fn(request: Any) -> Dict[str, Any]:
        n = (len(request.messages) + 1) // 2
        if request.on_event is not None:
            request.on_event({"type": "message_start", "message": {"id": f"m{n}"}})
        if n >= turns:
            return reply("finished")
        return reply(tool_use("step", {"n": n}, id=f"toolu_{n}"))

    return Agent(model="m", model_client=FunctionModelClient(fn, record=False),
                 tools=[step], max_turns=turns + 1, **options)


def one_query(rng: random.Random, how: str) -> None:
    agent = tool_agent(rng.randint(1, 6), include_partial_messages=rng.random() < 0.3)
    controller = AbortController()
    stop_after = rng.randint(0, 8)
    jitter = rng.random() * 0.003
    if how == "abort":
        in_thread(lambda: time.sleep(jitter) or controller.abort("stop"))
    elif how == "interrupt-from-a-thread":
        in_thread(lambda: time.sleep(jitter) or agent.interrupt())
    query = agent.query("go", signal=controller.signal)
    started = time.monotonic()
    last = None
    for seen, message in enumerate(query):
        last = message
        if seen == stop_after and how == "close":
            query.close()
            break
        if seen == stop_after and how == "interrupt":
            agent.interrupt()
        if rng.random() < 0.1:
            time.sleep(rng.random() * 0.001)
    assert time.monotonic() - started < WAIT_S
    history = agent.get_history()
    assert_well_formed(history)
    if how == "all":
        assert last.subtype == "success"
    elif how != "close":
        assert last.type == "result"


HOWS = ["all", "close", "interrupt", "interrupt-from-a-thread", "abort"]


def test_many_short_queries_ended_from_every_side_end_promptly_and_well_formed(bells):
    before = set(lattice_threads())
    failures: List[BaseException] = []

    def consumer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(25):
                one_query(rng, rng.choice(HOWS))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [in_thread(consumer, seed) for seed in range(4)]
    for thread in threads:
        thread.join(WAIT_S * 3)
        assert not thread.is_alive(), "a query never ended (a lost wake-up?)"
    assert not failures, failures[0]
    join_lattice_threads(before)


def test_a_polled_event_ends_a_lockstep_query_from_another_thread(bells):
    for _ in range(20):
        event = threading.Event()
        agent = tool_agent(50)
        messages = []
        for message in agent.query("go", signal=event):
            messages.append(message)
            if len(messages) == 3:
                in_thread(event.set)
        assert messages[-1].type == "result" and messages[-1].subtype == "error_abort"
        assert_well_formed(agent.get_history())


def test_at_most_max_alive_descriptor_bells_exist_then_locks(monkeypatch):
    """A server streaming many query() runs at once keeps its descriptors for sockets."""
    import gc

    if os.name != "posix":
        pytest.skip("fd doorbells are POSIX only")
    gc.collect()
    monkeypatch.setattr(FdDoorbell, "MAX_ALIVE", len(handoff_module._ALIVE) + 3)
    held = [fast_doorbell() for _ in range(5)]
    assert [type(b) for b in held] == [FdDoorbell] * 3 + [Doorbell] * 2
    del held
    gc.collect()
    assert type(fast_doorbell()) is FdDoorbell  # given back: descriptors again
