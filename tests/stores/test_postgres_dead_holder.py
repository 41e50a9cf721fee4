"""A PostgreSQL lock holder killed while one of its writes is still running in the server.

``kill -9`` closes the client's sockets, but a statement the server has already received
still runs to its end: a backend notices its client is gone only when it answers. If the
write ran on a connection other than the one holding the advisory lock, the lock would be
freed (that backend is idle and sees the closed socket at once) while the write is still
to come, and the next holder would load a history that then changes under it. The store
sends every statement of a held session through the lock's connection, so the session
stays held until the dead holder's last write has committed.

The write is kept running by a table lock the test holds (``LOCK TABLE ... IN EXCLUSIVE
MODE`` lets reads through and holds inserts back).
"""

import os
import signal
import subprocess
import time
import uuid

import pytest
import real_parts
from store_kinds import child, make_store

from lattice import ConcurrentQueryError

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals")
psycopg = real_parts.require("psycopg")

HOLDER = """
    import sys
    from store_kinds import make_store

    store = make_store("postgres-psycopg", sys.argv[1], sys.argv[2])
    with store.lock():
        store.append({"role": "user", "content": "before"})
        print("held", flush=True)
        sys.stdin.readline()
        store.append({"role": "assistant", "content": "the dead holder's last write"})
        print("not reached: the test kills this process first", flush=True)
"""


def backends(conn, app):
    """``[(pid, waiting on a lock)]`` of the server processes serving ``app``'s clients."""
    rows = conn.execute("SELECT pid, wait_event_type FROM pg_stat_activity "
                        "WHERE application_name = %s", (app,)).fetchall()
    return [(pid, wait == "Lock") for pid, wait in rows]


def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_killed_holder_keeps_the_session_until_its_last_write_lands(postgres_server,
                                                                      monkeypatch):
    conninfo = postgres_server.conninfo
    session = f"dead-{uuid.uuid4().hex[:12]}"
    app = f"holder-{uuid.uuid4().hex[:8]}"
    store = make_store("postgres-psycopg", conninfo, session)
    store.load()  # the table exists
    watch = psycopg.connect(conninfo, autocommit=True)
    blocker = psycopg.connect(conninfo)  # a transaction that holds inserts back
    monkeypatch.setenv("PGAPPNAME", app)  # names the child's connections on the server
    holder = child(HOLDER, conninfo, session, stdin=subprocess.PIPE)
    monkeypatch.delenv("PGAPPNAME")
    try:
        assert holder.stdout.readline().strip() == "held"
        blocker.execute(f"LOCK TABLE {store.table} IN EXCLUSIVE MODE")
        holder.stdin.write("go\n")
        holder.stdin.flush()
        wait_for(lambda: any(waiting for _, waiting in backends(watch, app)),
                 "the holder's insert to wait for the table lock")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
        # Every backend of the dead holder that is not running a statement goes away.
        wait_for(lambda: all(waiting for _, waiting in backends(watch, app)),
                 "the dead holder's idle connections to end")
        with pytest.raises(ConcurrentQueryError):
            with store.lock():
                pass  # the session is free while the dead holder's write is still to come
    finally:
        blocker.rollback()  # the held-back insert runs and commits; its backend ends
        blocker.close()
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    with store.lock(wait_s=10):
        assert [m["content"] for m in store.load()] == [
            "before", "the dead holder's last write"]
    wait_for(lambda: not backends(watch, app), "the dead holder's backends to end")
    watch.close()
