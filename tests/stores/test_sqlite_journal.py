"""SqliteHistoryStore's call journal in rows of its own (#39): a durable tool turn writes
its reply and its call's entry (``append_and_save_calls``), not the whole record again;
a whole record writes only the journal rows that differ from the stored ones; what is
read back is the record as it was saved, with every entry."""

import json
import sqlite3

import pytest

from lattice import LockLostError, SqliteHistoryStore
from lattice.stores.capabilities import Capabilities


def reply(n):
    return {"role": "assistant", "content": [
        {"type": "tool_use", "id": f"t{n}", "name": "step", "input": {"n": n}}]}


def record(**extra):
    return {"run_id": "r", "state": "running", "prompt": "go", "index": 0,
            "started_calls": {}, **extra}


def rows(path, sql):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_the_store_offers_journal_entries_by_themselves(tmp_path):
    caps = Capabilities.of(SqliteHistoryStore(str(tmp_path / "h.db"), "s"))
    assert caps.saves_calls and caps.writes_with_runs and caps.records_runs


def test_turns_write_the_journal_row_and_leave_the_record_row(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.save_run(record())
    (ver,) = rows(path, "SELECT ver FROM lattice_runs")[0]
    for n in range(1, 4):
        store.append_and_save_calls(reply(n), "r", {f"t{n}": 1})
    store.save_calls("r", {"t4": 1, "t5": 2})  # (several at once: one transaction)
    # the record's row was not written again: the journal went to its rows
    assert rows(path, "SELECT ver FROM lattice_runs") == [(ver,)]
    stored = json.loads(rows(path, "SELECT record FROM lattice_runs")[0][0])
    assert stored["started_calls"] == {}
    assert sorted(rows(path, "SELECT call_id, attempt FROM lattice_run_calls")) == [
        ("t1", 1), ("t2", 1), ("t3", 1), ("t4", 1), ("t5", 2)]
    # kept in its key's b-tree: a journal row dirties one page, not a table's and an index's
    (schema,) = rows(path, "SELECT sql FROM sqlite_master WHERE name = 'lattice_run_calls'")[0]
    assert schema.rstrip().endswith("WITHOUT ROWID")
    want = {"t1": 1, "t2": 1, "t3": 1, "t4": 1, "t5": 2}
    for reader in (store, SqliteHistoryStore(path, "s")):  # this store and a fresh one
        got = reader.load_run("r")
        assert got["started_calls"] == want
        assert got["updated_at"] >= got["started_at"]
        assert [r["started_calls"] for r in reader.list_runs()] == [want]
    assert [m["content"][0]["id"] for m in store.load()] == ["t1", "t2", "t3"]


def test_an_attempt_run_again_is_updated(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.save_run(record(started_calls={"t1": 1}))
    store.append_and_save_calls(reply(1), "r", {"t1": 2})
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t1": 2}
    store.save_run(record(started_calls={"t1": 3}))
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t1": 3}


def test_a_record_kept_whole_by_an_older_version_is_read_as_it_was(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.save_run(record())
    old = record(started_calls={"t0": 1}, session_id="s", started_at=1.0, updated_at=2.0)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE lattice_runs SET record = ?", (json.dumps(old),))
    conn.close()
    fresh = SqliteHistoryStore(path, "s")
    assert fresh.load_run("r")["started_calls"] == {"t0": 1}
    fresh.append_and_save_calls(reply(1), "r", {"t1": 1})
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t0": 1, "t1": 1}
    mine = fresh.load_run("r")  # saved whole: the old journal moves to rows of its own
    fresh.save_run(dict(mine, state="ended", result={"subtype": "success"}))
    assert sorted(rows(path, "SELECT call_id FROM lattice_run_calls")) == [("t0",), ("t1",)]
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t0": 1, "t1": 1}


def test_a_bad_turn_writes_neither_message_nor_entry(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.save_run(record())
    # an attempt that is not a number: refused before any I/O, naming the call
    with pytest.raises(ValueError, match=r"attempt of call 't1'.* got 'first'"):
        store.append_and_save_calls(reply(1), "r", {"t1": "first"})
    with pytest.raises(ValueError, match=r"attempt of call 't2'.* got None"):
        store.save_run(record(started_calls={"t2": None}))
    with pytest.raises(TypeError):  # a message JSON cannot hold
        store.append_and_save_calls({"role": "assistant", "content": object()}, "r",
                                    {"t1": 1})
    assert store.load() == [] and store.load_run("r")["started_calls"] == {}
    store.append_and_save_calls(reply(1), "r", {"t1": 1})
    assert store.load_run("r")["started_calls"] == {"t1": 1}


def test_a_whole_record_writes_only_the_journal_rows_that_differ(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    mine = record()
    store.save_run(mine)
    for n in (1, 2):
        store.append_and_save_calls(reply(n), "r", {f"t{n}": 1})
    before = dict(rows(path, "SELECT call_id, at FROM lattice_run_calls"))
    # the run ends: its record is written whole, with one call more and one run again
    mine = dict(mine, state="ended", started_calls={"t1": 1, "t2": 2, "t3": 1})
    store.save_run(mine)
    after = {c: (a, at) for c, a, at in rows(
        path, "SELECT call_id, attempt, at FROM lattice_run_calls")}
    assert after["t1"] == (1, before["t1"])  # its row was left as it was
    assert after["t2"][0] == 2 and after["t2"][1] > before["t2"] and after["t3"][0] == 1
    fresh = SqliteHistoryStore(path, "s").load_run("r")
    assert (fresh["state"], fresh["started_calls"]) == ("ended", mine["started_calls"])
    # another store (another process) compares with the rows, not with what it wrote
    SqliteHistoryStore(path, "s").save_run(mine)
    assert dict(rows(path, "SELECT call_id, at FROM lattice_run_calls"))["t1"] == before["t1"]


@pytest.mark.parametrize("write", [
    lambda store: store.save_calls("r", {"t2": 1}),
    lambda store: store.save_calls("r", {"t2": 1, "t3": 1}),
    lambda store: store.append_and_save_calls(reply(2), "r", {"t2": 1}),
], ids=["one entry", "entries", "with a message"])
def test_a_taken_over_holder_writes_no_entry(tmp_path, write):
    path = str(tmp_path / "h.db")
    first = SqliteHistoryStore(path, "s")
    first.save_run(record())
    hold = first.lock()
    hold.__enter__()
    try:
        first.save_calls("r", {"t1": 1})  # the holder's write lands
        conn = sqlite3.connect(path)  # its lease expires: another holder takes the session
        with conn:
            conn.execute("UPDATE lattice_history_leases SET expires_at = 0")
        conn.close()
        with SqliteHistoryStore(path, "s").lock():
            with pytest.raises(LockLostError):  # refused by the store's fence check
                write(first)
            assert hold.lost
    finally:
        hold.__exit__(None, None, None)
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t1": 1}
    assert SqliteHistoryStore(path, "s").load() == []


def test_a_reply_with_several_entries_or_none(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.save_run(record())
    store.append_and_save_calls(reply(1), "r", {"t1": 1, "t2": 1, "t3": 2})
    store.append_and_save_calls(reply(4), "r", {})  # the reply alone
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {
        "t1": 1, "t2": 1, "t3": 2}
    assert [m["content"][0]["id"] for m in store.load()] == ["t1", "t4"]


def test_each_connection_makes_the_view_it_writes_a_turn_through(tmp_path):
    """The view and its trigger are TEMP (a connection's own): nothing in the file."""
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.save_run(record())
    store.append_and_save_calls(reply(1), "r", {"t1": 1})
    assert rows(path, "SELECT name FROM sqlite_master WHERE name LIKE '%reply_with%'") == []
    other = SqliteHistoryStore(path, "s")  # new connections: made again
    other.append_and_save_calls(reply(2), "r", {"t2": 1})
    assert other.load_run("r")["started_calls"] == {"t1": 1, "t2": 1}
