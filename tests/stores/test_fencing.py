"""Fencing tokens (SPEC 18): every lock() acquisition gets a newer token, and a holder that was
outlived (a lease that ran out while it was paused, a lock that died with its connection)
can write nothing after another holder took the session over."""

import os
import signal
import sqlite3
import time

import pytest
from store_kinds import PROCESS_KINDS, assistant, backend_for, child, pg_connect, user

import lattice.stores.sqlite_lease as lease
from lattice import LockLostError, PostgresHistoryStore, SqliteHistoryStore
from lattice.testing import history_problems

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals")


@pytest.fixture(params=PROCESS_KINDS + ("memory",))
def backend(request, tmp_path):
    yield from backend_for(request, tmp_path)


@pytest.fixture
def short_lease(monkeypatch):
    """A 0.5 s lease renewed every 0.1 s, with a renewer of its own."""
    monkeypatch.setattr(lease, "TTL_S", 0.5)
    monkeypatch.setattr(lease, "RENEW_S", 0.1)
    monkeypatch.setattr(lease, "_renewer", lease._Renewer())


def test_every_acquisition_gets_a_newer_token(backend):
    tokens = []
    for _ in range(3):
        for store in (backend.store(), backend.store()):
            with store.lock() as hold:
                tokens.append(hold.token)
                assert hold.lost is False
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens) and tokens[0] >= 1


def test_a_holder_writes_and_a_stale_token_is_refused_in_sqlite(tmp_path, short_lease):
    path = tmp_path / "h.db"
    stale = SqliteHistoryStore(path, "s")
    held = stale.lock()
    held.__enter__()
    stale.append(user("before the pause"))
    lease._renewer.discard(held)  # as a paused process: no renewals, the lease runs out
    other = SqliteHistoryStore(path, "s")
    with other.lock(wait_s=30) as taker:
        assert taker.token > held.token
        other.append(assistant("the new holder"))
    for write in (lambda: stale.append_and_save_run(user("and"), {"run_id": "r"}),  # first:
                  # the transaction's own check refuses it (later ones: known lost at once)
                  lambda: stale.append(user("after the takeover")),
                  lambda: stale.replace([user("rewritten by the stale holder")]),
                  lambda: stale.save_run({"run_id": "r", "state": "running"})):
        with pytest.raises(LockLostError, match="lock was lost"):
            write()
    assert held.lost
    assert other.load() == [user("before the pause"), assistant("the new holder")]
    assert other.load_run("r") is None
    held.__exit__(None, None, None)
    with stale.lock() as again:  # a new acquisition writes again
        stale.append(user("a new query"))
        assert again.token > taker.token
    assert other.load()[-1] == user("a new query")


def test_a_renewal_that_finds_the_lease_taken_marks_it_lost(tmp_path, short_lease):
    path = tmp_path / "h.db"
    store = SqliteHistoryStore(path, "s")
    with store.lock() as held:
        db = sqlite3.connect(path)
        db.execute("UPDATE lattice_history_leases SET owner = 'someone else'")
        db.commit()
        db.close()
        deadline = time.monotonic() + 30
        while not held.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.lost
        with pytest.raises(LockLostError):  # refused before any SQL: the fence is still ours
            store.append(user("late"))
    assert store.load() == []


# -- PostgreSQL: the lock dies with its connection -------------------------------------------


def kill_lock_connection(conninfo, store):
    """pg_terminate_backend the connection holding ``store``'s advisory lock."""
    key = store._lock_key & 0xFFFFFFFFFFFFFFFF
    with pg_connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND classid::bigint = %s AND objid::bigint = %s",
            (key >> 32, key & 0xFFFFFFFF)).fetchall()
        assert [ok for _, ok in rows] == [True], rows
        deadline = time.monotonic() + 30  # the backend ends a moment after it is told to
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                           (rows[0][0],)).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)


@pytest.fixture(params=["psycopg", "pg8000"])
def pg(request, postgres_server):
    pytest.importorskip(request.param)
    import uuid

    session = f"f-{uuid.uuid4().hex[:10]}"

    def make():
        return PostgresHistoryStore(postgres_server.conninfo, session, driver=request.param)

    return postgres_server.conninfo, make


def test_a_lost_lock_connection_is_retaken_when_nobody_came_between(pg):
    conninfo, make = pg
    store = make()
    with store.lock() as held:
        store.append(user("one"))
        kill_lock_connection(conninfo, store)
        store.append(assistant("two"))  # the first use after the loss succeeds
        store.save_run({"run_id": "r"})
        with pytest.raises(lattice_busy()):
            with make().lock():
                pass
        assert not held.lost
    assert make().load() == [user("one"), assistant("two")]


def lattice_busy():
    from lattice import ConcurrentQueryError

    return ConcurrentQueryError


@pytest.mark.parametrize("taker_still_holds", [False, True])
def test_a_lost_lock_taken_by_another_refuses_every_later_write(pg, taker_still_holds):
    conninfo, make = pg
    stale = make()
    held = stale.lock()
    held.__enter__()
    try:
        stale.append(user("one"))
        kill_lock_connection(conninfo, stale)
        other = make()
        taker = other.lock(wait_s=10)
        taker.__enter__()
        other.append(assistant("the new holder"))
        if not taker_still_holds:
            taker.__exit__(None, None, None)
        for write in (lambda: stale.append(user("after the takeover")),
                      lambda: stale.replace([user("rewritten")]),
                      lambda: stale.save_run({"run_id": "r"}),
                      lambda: stale.append_and_save_run(user("and"), {"run_id": "r"})):
            with pytest.raises(LockLostError):
                write()
        assert held.lost
        assert stale.load() == [user("one"), assistant("the new holder")]  # reads still work
        if taker_still_holds:
            taker.__exit__(None, None, None)
    finally:
        held.__exit__(None, None, None)
    assert make().load_run("r") is None


# -- real processes: SIGSTOP a SQLite holder past its lease -----------------------------------

STOPPED_HOLDER = """
    import sys, time
    import lattice.stores.sqlite_lease as lease
    from lattice import LockLostError, SqliteHistoryStore

    lease.TTL_S, lease.RENEW_S = 1.0, 0.2
    store = SqliteHistoryStore(sys.argv[1], "s")
    with store.lock():
        i = 0
        try:
            while True:
                i += 1
                store.append({"role": "user", "content": f"A{i}"})
                store.append({"role": "assistant", "content": f"A{i}"})
                print(i, flush=True)
                time.sleep(0.01)
        except LockLostError:
            print("lost", flush=True)
"""


@pytest.mark.slow
def test_a_holder_stopped_past_its_lease_writes_nothing_after_the_takeover(tmp_path):
    path = str(tmp_path / "h.db")
    proc = child(STOPPED_HOLDER, path)
    try:
        for _ in range(5):
            assert proc.stdout.readline().strip().isdigit()
        os.kill(proc.pid, signal.SIGSTOP)
        taken_at = time.monotonic()
        store = SqliteHistoryStore(path, "s")
        with store.lock(wait_s=30):  # free once the stopped holder's 1 s lease ran out
            assert time.monotonic() - taken_at > 0.5
            before = store.load()
            store.append({"role": "user", "content": "B"})
            store.append({"role": "assistant", "content": "B"})
            os.kill(proc.pid, signal.SIGCONT)  # it goes on while the new holder holds
            time.sleep(0.3)
        lines = [line.strip() for line in proc.stdout]
        assert proc.wait(30) == 0 and lines[-1] == "lost", lines
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        proc.stdout.close()
    after = store.load()
    b = [{"role": "user", "content": "B"}, {"role": "assistant", "content": "B"}]
    assert after == before + b  # nothing A wrote after the takeover
    assert history_problems(after) == []


# -- real processes: the PostgreSQL lock's connection terminated --------------------------------

CUT_OFF_HOLDER = """
    import sys, time
    from store_kinds import make_store
    from lattice import LockLostError

    store = make_store(sys.argv[1], sys.argv[2], sys.argv[3])
    with store.lock():
        i = 0
        try:
            while True:
                i += 1
                store.append({"role": "user", "content": f"A{i}"})
                store.append({"role": "assistant", "content": f"A{i}"})
                print(i, flush=True)
                time.sleep(0.01)
        except LockLostError:
            print("lost", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("taker_still_holds", [True, False])
def test_a_holder_whose_lock_connection_died_writes_nothing_after_the_takeover(
        postgres_server, taker_still_holds):
    pytest.importorskip("psycopg")
    import uuid

    from store_kinds import make_store

    conninfo, session = postgres_server.conninfo, f"p-{uuid.uuid4().hex[:10]}"
    store = make_store("postgres-psycopg", conninfo, session)
    proc = child(CUT_OFF_HOLDER, "postgres-psycopg", conninfo, session)
    try:
        for _ in range(5):
            assert proc.stdout.readline().strip().isdigit()
        os.kill(proc.pid, signal.SIGSTOP)  # so the takeover surely lands before it goes on
        kill_lock_connection(conninfo, store)
        with store.lock(wait_s=30):
            before = store.load()
            store.append({"role": "user", "content": "B"})
            store.append({"role": "assistant", "content": "B"})
            if taker_still_holds:
                os.kill(proc.pid, signal.SIGCONT)
                time.sleep(0.3)
        os.kill(proc.pid, signal.SIGCONT)
        lines = [line.strip() for line in proc.stdout]
        assert proc.wait(30) == 0 and lines[-1] == "lost", lines
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        proc.stdout.close()
    after = store.load()
    assert after == before + [{"role": "user", "content": "B"},
                              {"role": "assistant", "content": "B"}]
    assert history_problems(after) == []
