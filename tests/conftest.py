"""Fixtures only; the helpers live in helpers.py."""

import pytest
from helpers import Gates, join_lattice_threads


@pytest.fixture
def no_thread_leak():
    """Asserts the test leaves no lattice threads running (with well-behaved clients)."""
    yield
    join_lattice_threads(5)


@pytest.fixture
def gates():
    g = Gates()
    yield g
    g.release_all()


# A private PostgreSQL cluster for the store tests (see pg_fixture.py).
from pg_fixture import postgres_server  # noqa: E402, F401
