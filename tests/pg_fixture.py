"""A real PostgreSQL server for the tests: one private cluster per test session.

``initdb`` in a temporary folder, the server on a Unix socket there (run as the ``postgres``
user through ``runuser`` when the tests run as root, since PostgreSQL refuses root), stopped
and removed when the session ends. Tests that use ``postgres_server`` are skipped, with the
reason, only when this machine has no PostgreSQL server programs.
"""

import pytest
import real_parts

from lattice.testing.postgres import PostgresUnavailable, TemporaryPostgres


@pytest.fixture(scope="session")
def postgres_server():
    server = TemporaryPostgres()
    try:
        server.start()
    except PostgresUnavailable as exc:
        real_parts.skip(f"a PostgreSQL server: {exc}", "apt-get install postgresql")
    try:
        yield server
    finally:
        server.stop()
