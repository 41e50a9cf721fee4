"""SqliteHistoryStore: sessions, laziness, transactions, threads and processes."""

import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from typing import List

import pytest
from helpers import MODEL, WAIT_S, json_copy

import lattice
from lattice import (
    Agent,
    SqliteHistoryStore,
)
from lattice.testing import ScriptedModelClient, assert_well_formed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(lattice.__file__)))


def msg(i, text="hello"):
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{text} {i}"}


def test_round_trip_and_copies(tmp_path):
    store = SqliteHistoryStore(tmp_path / "h.db", "ada")
    message = {"role": "user", "content": [{"type": "text", "text": "héllo 你好"}]}
    store.append(message)
    message["content"][0]["text"] = "changed"
    store.append(msg(1))
    assert store.load() == [
        {"role": "user", "content": [{"type": "text", "text": "héllo 你好"}]}, msg(1)]
    assert SqliteHistoryStore(str(tmp_path / "h.db"), "ada").load() == store.load()
    store.close()


def test_no_io_until_first_use(tmp_path):
    path = tmp_path / "a" / "b" / "h.db"
    store = SqliteHistoryStore(path, "s")
    assert store.load() == []
    assert store.list_sessions() == []
    store.delete()
    assert not (tmp_path / "a").exists()
    store.append(msg(0))
    assert path.exists()
    assert store.load() == [msg(0)]
    store.close()


def test_session_id_must_be_a_non_empty_string(tmp_path):
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="session_id"):
            SqliteHistoryStore(tmp_path / "h.db", bad)


def test_sessions_are_isolated_listed_and_deleted(tmp_path):
    path = tmp_path / "h.db"
    ada = SqliteHistoryStore(path, "ada")
    bob = ada.with_session("bob")
    zed = SqliteHistoryStore(path, "zed")
    ada.append(msg(0, "ada"))
    bob.append(msg(0, "bob"))
    bob.append(msg(1, "bob"))
    zed.append(msg(0, "zed"))
    assert ada.load() == [msg(0, "ada")]
    assert bob.load() == [msg(0, "bob"), msg(1, "bob")]
    assert zed.list_sessions() == ["ada", "bob", "zed"]
    bob.delete()
    assert ada.list_sessions() == ["ada", "zed"]
    assert bob.load() == []
    ada.delete("zed")
    assert ada.list_sessions() == ["ada"]
    assert ada.load() == [msg(0, "ada")]
    for s in (ada, zed):
        s.close()


def test_replace_is_one_transaction(tmp_path):
    path = tmp_path / "h.db"
    store = SqliteHistoryStore(path, "s")
    other = store.with_session("other")
    for i in range(3):
        store.append(msg(i))
    other.append(msg(0, "other"))
    store.replace([msg(7), msg(8)])
    assert store.load() == [msg(7), msg(8)]
    store.append(msg(9))
    assert store.load() == [msg(7), msg(8), msg(9)]
    assert other.load() == [msg(0, "other")]
    # Make the database refuse the second row: the DELETE before it must roll back.
    with sqlite3.connect(path) as db:
        db.execute("""CREATE TRIGGER refuse BEFORE INSERT ON lattice_history
                      WHEN NEW.message LIKE '%boom%' BEGIN SELECT RAISE(ABORT, 'boom'); END""")
    db.close()
    with pytest.raises(sqlite3.Error, match="boom"):
        store.replace([msg(1), msg(2, "boom")])
    assert store.load() == [msg(7), msg(8), msg(9)]
    with pytest.raises(TypeError):
        store.replace([msg(1), {"role": "user", "content": object()}])
    assert store.load() == [msg(7), msg(8), msg(9)]
    store.close()


def test_wal_mode_and_table_layout(tmp_path):
    path = tmp_path / "h.db"
    store = SqliteHistoryStore(path, "s")
    store.append(msg(0))
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = db.execute("SELECT session_id, seq, message FROM lattice_history").fetchall()
    assert rows == [("s", 1, json.dumps(msg(0), separators=(",", ":")))]
    db.close()
    store.close()


def test_corrupt_rows_are_skipped_and_counted(tmp_path, caplog):
    path = tmp_path / "h.db"
    store = SqliteHistoryStore(path, "s")
    store.append(msg(0))
    db = sqlite3.connect(path)
    db.execute("INSERT INTO lattice_history VALUES ('s', 2, '{broken')")
    db.execute("INSERT INTO lattice_history VALUES ('s', 3, '[1]')")
    db.commit()
    db.close()
    store.append(msg(1))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert store.load() == [msg(0), msg(1)]
    assert "skipped 2 corrupt row(s)" in caplog.text
    store.close()


def test_close_then_reuse(tmp_path):
    with SqliteHistoryStore(tmp_path / "h.db", "s", fsync=True) as store:
        store.append(msg(0))
    store.append(msg(1))  # a new connection
    assert store.load() == [msg(0), msg(1)]
    assert "h.db" in repr(store) and "'s'" in repr(store)
    store.close()


def test_threads_on_the_same_and_different_sessions(tmp_path):
    path = tmp_path / "h.db"
    shared = SqliteHistoryStore(path, "shared")
    per_thread = 60
    errors = []

    def work(n):
        try:
            own = shared.with_session(f"t{n}") if n % 2 else SqliteHistoryStore(path, f"t{n}")
            for i in range(per_thread):
                shared.append({"role": "user", "content": f"{n}:{i}"})
                own.append({"role": "user", "content": f"{n}:{i}"})
            if n % 2 == 0:
                own.close()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    loaded = [m["content"] for m in shared.load()]
    assert len(loaded) == 8 * per_thread
    for n in range(8):
        assert [c for c in loaded if c.startswith(f"{n}:")] == [
            f"{n}:{i}" for i in range(per_thread)]
        assert [m["content"] for m in shared.with_session(f"t{n}").load()] == [
            f"{n}:{i}" for i in range(per_thread)]
    assert shared.list_sessions() == ["shared"] + [f"t{n}" for n in range(8)]
    shared.close()


@pytest.mark.skipif(os.name == "nt", reason="POSIX processes")
def test_processes_on_the_same_and_different_sessions(tmp_path):
    path = tmp_path / "db" / "h.db"
    go = tmp_path / "go"
    per_proc = 80
    code = """
        import os, sys, time
        from lattice.stores import SqliteHistoryStore
        path, go, n, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
        shared = SqliteHistoryStore(path, "shared")
        own = shared.with_session("p" + n)
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        for i in range(count):
            shared.append({"role": "user", "content": f"{n}:{i}"})
            own.append({"role": "user", "content": f"{n}:{i}"})
        shared.close()
    """
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(path), str(go),
                               str(n), str(per_proc)], env=env, stdout=subprocess.PIPE,
                              text=True) for n in range(4)]
    for proc in procs:  # every process has started and waits for the go
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    for proc in procs:
        proc.stdout.close()
    store = SqliteHistoryStore(path, "shared")
    loaded = [m["content"] for m in store.load()]
    assert len(loaded) == 4 * per_proc
    for n in range(4):
        expected = [f"{n}:{i}" for i in range(per_proc)]
        assert [c for c in loaded if c.startswith(f"{n}:")] == expected
        assert [m["content"] for m in store.with_session(f"p{n}").load()] == expected
    assert store.list_sessions() == ["p0", "p1", "p2", "p3", "shared"]
    db = sqlite3.connect(path)
    seqs = [s for (s,) in db.execute(
        "SELECT seq FROM lattice_history WHERE session_id = 'shared' ORDER BY seq")]
    db.close()
    assert seqs == list(range(1, 4 * per_proc + 1))
    store.close()


@pytest.mark.skipif(os.name == "nt", reason="POSIX processes")
def test_resume_in_a_second_process(tmp_path):
    path = tmp_path / "h.db"
    SqliteHistoryStore(path, "ada").append(msg(0, "first process"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, sys
        from lattice.stores import SqliteHistoryStore
        store = SqliteHistoryStore(sys.argv[1], "ada")
        print(json.dumps(store.load()))
        store.append({"role": "assistant", "content": "second process"})
        store.close()
    """), str(path)], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [msg(0, "first process")]
    store = SqliteHistoryStore(path, "ada")
    assert store.load()[-1] == {"role": "assistant", "content": "second process"}
    store.close()


def test_replace_racing_an_appender(tmp_path):
    path = tmp_path / "h.db"
    stop = threading.Event()
    appended = []

    def appender():
        store = SqliteHistoryStore(path, "s")
        i = 0
        while not stop.is_set():
            store.append({"role": "user", "content": "", "i": i})
            appended.append(i)
            i += 1
        store.close()

    store = SqliteHistoryStore(path, "s")
    store.append({"role": "user", "start": True})
    thread = threading.Thread(target=appender)
    thread.start()
    import time

    def wait_for_appends(count):  # events would change the appender's pace; poll instead
        deadline = time.monotonic() + 30
        while len(appended) < count and time.monotonic() < deadline:
            time.sleep(0.001)

    wait_for_appends(1)  # the replaces really race the appender
    for k in range(20):
        store.replace([{"role": "user", "content": "summary", "summary": k}])
        time.sleep(0.002)
    # A few appends surely started after the last replace (however busy the machine).
    wait_for_appends(len(appended) + 3)
    stop.set()
    thread.join()
    loaded = store.load()
    assert loaded[0] == {"role": "user", "content": "summary", "summary": 19}
    tail = [m["i"] for m in loaded[1:]]
    assert tail and tail == list(range(tail[0], appended[-1] + 1))
    store.close()


def test_a_lease_held_past_its_ttl_is_renewed_and_a_dead_one_expires(tmp_path, monkeypatch):
    import lattice.stores.sqlite_lease as lease

    monkeypatch.setattr(lease, "TTL_S", 1.0)
    monkeypatch.setattr(lease, "RENEW_S", 0.1)
    # A renewer of its own: one left running by an earlier test sleeps the old RENEW_S (1 s)
    # before its next renewal, as long as the TTL here.
    monkeypatch.setattr(lease, "_renewer", lease._Renewer())
    path = tmp_path / "h.db"

    def expires_at() -> float:
        db = sqlite3.connect(path)
        try:
            [(value,)] = db.execute("SELECT expires_at FROM lattice_history_leases").fetchall()
        finally:
            db.close()
        return float(value)

    store = SqliteHistoryStore(path, "s")
    with store.lock():
        first = expires_at()
        # Holding it past its first expiry is the point: only the renewals keep it.
        time.sleep(max(0.0, first + 0.2 - time.time()))
        assert expires_at() > first + 0.2  # renewed
        with pytest.raises(lattice.ConcurrentQueryError):
            with SqliteHistoryStore(tmp_path / "h.db", "s").lock():
                pass
    # A holder that stops renewing (as a killed process does) loses the lease after the TTL.
    holder = store.lock()
    holder.__enter__()
    lease._renewer.discard(holder)
    started = time.monotonic()
    with SqliteHistoryStore(tmp_path / "h.db", "s").lock(wait_s=30):
        assert 0.5 < time.monotonic() - started < 25
    store.close()


# -- SPEC 8 conformance ----------------------------------------------------------------------


SEED = [{"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello Ada"}]}]


def test_sqlite_sessions(tmp_path):
    path = tmp_path / "db" / "sessions.sqlite"
    s1 = SqliteHistoryStore(str(path), "alice")
    s2 = SqliteHistoryStore(str(path), "bob")
    assert s1.fail_on_error is False
    assert not path.exists() and not path.parent.exists()
    Agent(model=MODEL, model_client=ScriptedModelClient(["hi alice"]), history_store=s1) \
        .prompt("I am alice")
    Agent(model=MODEL, model_client=ScriptedModelClient(["hi bob"]), history_store=s2) \
        .prompt("I am bob")
    client = ScriptedModelClient(["alice again"])
    resumed = Agent(model=MODEL, model_client=client,
                    history_store=SqliteHistoryStore(path, "alice"))
    resumed.prompt("who?")
    sent = client.requests[0].messages
    assert sent[0] == {"role": "user", "content": "I am alice"} and len(sent) == 3
    assert SqliteHistoryStore(path, "bob").load()[0]["content"] == "I am bob"
    assert SqliteHistoryStore(path, "alice", fail_on_error=True).fail_on_error is True
    resumed.replace_history(SEED)
    assert SqliteHistoryStore(path, "alice").load() == SEED
    assert_well_formed(json_copy(SqliteHistoryStore(path, "bob").load()))


def test_sqlite_uses_wal(tmp_path):
    import sqlite3

    path = tmp_path / "s.sqlite"
    Agent(model=MODEL, model_client=ScriptedModelClient(["x"]),
          history_store=SqliteHistoryStore(path, "s")).prompt("go")
    with sqlite3.connect(str(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"


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
