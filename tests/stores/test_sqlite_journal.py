"""SqliteHistoryStore's call journal in rows of its own (#39): a durable tool turn writes
its reply and its call's row, not the whole record again; what is read back is the
record as it was saved."""

import json
import sqlite3

from lattice import SqliteHistoryStore


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


def test_turns_write_the_journal_row_and_leave_the_record_row(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    mine = record()
    store.save_run(mine)
    (ver,) = rows(path, "SELECT ver FROM lattice_runs")[0]
    for n in range(1, 4):
        mine["started_calls"][f"t{n}"] = 1
        store.append_and_save_run(reply(n), mine)
    # the record's row was not written again: the journal went to its rows
    assert rows(path, "SELECT ver FROM lattice_runs") == [(ver,)]
    stored = json.loads(rows(path, "SELECT record FROM lattice_runs")[0][0])
    assert stored["started_calls"] == {}
    assert sorted(rows(path, "SELECT call_id, attempt FROM lattice_run_calls")) == [
        ("t1", 1), ("t2", 1), ("t3", 1)]
    # kept in its key's b-tree: a journal row dirties one page, not a table's and an index's
    (schema,) = rows(path, "SELECT sql FROM sqlite_master WHERE name = 'lattice_run_calls'")[0]
    assert schema.rstrip().endswith("WITHOUT ROWID")
    for reader in (store, SqliteHistoryStore(path, "s")):  # this store and a fresh one
        got = reader.load_run("r")
        assert got["started_calls"] == {"t1": 1, "t2": 1, "t3": 1}
        assert got["updated_at"] >= got["started_at"]
        assert [r["started_calls"] for r in reader.list_runs()] == [got["started_calls"]]
    assert [m["content"][0]["id"] for m in store.load()] == ["t1", "t2", "t3"]


def test_a_change_beyond_the_journal_writes_the_whole_record(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    mine = record()
    store.save_run(mine)
    mine["started_calls"]["t1"] = 1
    mine["compacted_usage"] = {"input_tokens": 3}  # a new value
    store.append_and_save_run(reply(1), mine)
    assert SqliteHistoryStore(path, "s").load_run("r")["compacted_usage"] == {
        "input_tokens": 3}
    mine["compacted_usage"]["input_tokens"] = 4  # the same dict, changed in place
    mine["started_calls"]["t2"] = 1
    store.append_and_save_run(reply(2), mine)
    got = SqliteHistoryStore(path, "s").load_run("r")
    assert got["compacted_usage"] == {"input_tokens": 4}
    assert got["started_calls"] == {"t1": 1, "t2": 1}


def test_an_attempt_run_again_is_updated(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    mine = record(started_calls={"t1": 1})
    store.save_run(mine)
    mine["started_calls"]["t1"] = 2
    store.append_and_save_run(reply(1), mine)
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t1": 2}
    mine["started_calls"]["t1"] = 3
    store.save_run(mine)
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
    mine = fresh.load_run("r")
    mine["started_calls"]["t1"] = 1
    fresh.append_and_save_run(reply(1), mine)
    assert SqliteHistoryStore(path, "s").load_run("r")["started_calls"] == {"t0": 1, "t1": 1}


def test_a_failed_turn_writes_neither_and_the_next_writes_in_full(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    mine = record()
    store.save_run(mine)
    mine["started_calls"]["t1"] = 1
    mine["bad"] = object()  # not JSON: refused before any I/O
    try:
        store.append_and_save_run(reply(1), mine)
    except TypeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a record JSON cannot hold was written")
    assert store.load() == [] and store.load_run("r")["started_calls"] == {}
    del mine["bad"]
    store.append_and_save_run(reply(1), mine)
    assert store.load_run("r")["started_calls"] == {"t1": 1}


def test_a_whole_record_writes_only_the_journal_rows_it_has_not_written(tmp_path):
    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    mine = record()
    store.save_run(mine)
    for n in (1, 2):
        mine["started_calls"][f"t{n}"] = 1
        store.append_and_save_run(reply(n), mine)
    before = dict((c, at) for c, at in rows(path, "SELECT call_id, at FROM lattice_run_calls"))
    # the run ends: its record is written whole, with one call more and one run again
    mine = dict(mine, state="ended", started_calls={"t1": 1, "t2": 2, "t3": 1})
    store.save_run(mine)
    after = {c: (a, at) for c, a, at in rows(
        path, "SELECT call_id, attempt, at FROM lattice_run_calls")}
    assert after["t1"] == (1, before["t1"])  # its row was left as it was
    assert after["t2"][0] == 2 and after["t2"][1] > before["t2"] and after["t3"][0] == 1
    fresh = SqliteHistoryStore(path, "s").load_run("r")
    assert (fresh["state"], fresh["started_calls"]) == ("ended", mine["started_calls"])
    # a store that never wrote the run writes every row of a whole record
    SqliteHistoryStore(path, "s").save_run(mine)
    again = dict(rows(path, "SELECT call_id, at FROM lattice_run_calls"))
    assert again["t1"] > before["t1"]
