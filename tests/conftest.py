"""Fixtures only; the helpers live in helpers.py."""

import threading
import time

import pytest


@pytest.fixture
def no_thread_leak():
    """Asserts the test leaves no lattice threads running (with well-behaved clients)."""
    yield
    deadline = time.monotonic() + 5
    for thread in _lattice_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = _lattice_threads()
    assert not alive, f"threads still running: {alive}"


def _lattice_threads():
    return [t for t in threading.enumerate()
            if t.name.startswith(("lattice-query", "lattice-tool"))]


# A private PostgreSQL cluster for the store tests (see pg_fixture.py).
from pg_fixture import postgres_server  # noqa: E402, F401
