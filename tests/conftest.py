"""Fixtures only; the helpers live in helpers.py."""

import signal
import threading
import time
from typing import Any, Callable, Iterator

import pytest
from helpers import ANTHROPIC_ENV, WAIT_S, Gates, join_lattice_threads, lattice_threads

# The slow tests run in a second process alongside the others on a whole-suite run.
from slow_alongside import (  # noqa: F401
    pytest_configure,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
)


@pytest.fixture
def no_thread_leak():
    """Asserts the test leaves none of the lattice threads it started running (with
    well-behaved clients)."""
    before = set(lattice_threads())
    yield
    join_lattice_threads(before, 5)


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


@pytest.fixture
def gates():
    g = Gates()
    yield g
    g.release_all()


@pytest.fixture
def clean_anthropic_env(monkeypatch):
    """No ANTHROPIC_* variables from the environment leak into the client under test."""
    for name in ANTHROPIC_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def raw():
    """``raw(*responses)`` starts a RawServer (raw_server.py); all are closed at teardown."""
    from raw_server import RawServer

    servers = []

    def make(*responses):
        server = RawServer(*responses)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


# A private PostgreSQL cluster for the store tests (see pg_fixture.py), a private Redis
# server for the background-job tests (see redis_fixture.py); in CI a test skipped for a
# missing real part (Redis, Chromium, PostgreSQL, a job engine) fails instead (real_parts.py).
from pg_fixture import postgres_server  # noqa: E402, F401
from real_parts import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402, F401
from redis_fixture import redis_server  # noqa: E402, F401
