"""Fixtures only; the helpers live in helpers.py."""

import pytest
from helpers import ANTHROPIC_ENV, Gates, join_lattice_threads, lattice_threads


@pytest.fixture
def no_thread_leak():
    """Asserts the test leaves none of the lattice threads it started running (with
    well-behaved clients)."""
    before = set(lattice_threads())
    yield
    join_lattice_threads(before, 5)


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


# A private PostgreSQL cluster for the store tests (see pg_fixture.py).
from pg_fixture import postgres_server  # noqa: E402, F401

# A private Redis server for the background-job tests (see redis_fixture.py).
from redis_fixture import redis_server  # noqa: E402, F401
