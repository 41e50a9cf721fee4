"""The typed run record (issue 33): one shape, versioned, read in one place; 0.3 records
still load; damaged records are errors, not new runs (SPEC 21b)."""

import sqlite3

import pytest
from durable_world import World, reply, use

from lattice import HistoryStoreError, MemoryHistoryStore, SqliteHistoryStore
from lattice.durable.record import FORMAT, DamagedRecord, RunRecord

# What lattice 0.3 wrote for an ended run (JSONL/SQLite/PostgreSQL/memory alike), literally.
RECORD_0_3_ENDED = {
    "run_id": "job-7", "state": "ended", "prompt": "go", "index": 0,
    "started_at": 1700000000.5, "updated_at": 1700000003.25, "started_calls": {"c1": 1},
    "session_id": None,
    "result": {"type": "result", "subtype": "success", "is_error": False, "result": "done",
               "structured_result": None,
               "usage": {"input_tokens": 20, "output_tokens": 5,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
               "stop_reason": "end_turn", "num_turns": 2, "duration_ms": 31,
               "error": None, "run_id": "job-7", "replayed": False,
               "error_type": None, "error_message": None, "pending_approval_ids": []},
    "end_index": 4,
}


def test_a_0_3_record_loads_as_format_0_and_writes_back_the_same_keys():
    record = RunRecord.from_dict(RECORD_0_3_ENDED)
    assert record.format == 0 and record.is_ended and record.end_index == 4
    assert record.started_calls == {"c1": 1} and record.prompt == "go"
    again = record.to_dict()
    assert {k: v for k, v in again.items() if k != "format"} == {
        k: v for k, v in RECORD_0_3_ENDED.items() if k != "session_id"}
    assert RunRecord.from_dict(again) == record


def test_a_new_record_carries_the_format_and_round_trips():
    record = RunRecord.new("r", [{"type": "text", "text": "hi"}], 3)
    data = record.to_dict()
    assert data["format"] == FORMAT and data["state"] == "running" and data["index"] == 3
    assert RunRecord.from_dict(data) == record


def test_keys_a_later_version_adds_are_kept():
    data = dict(RECORD_0_3_ENDED, format=FORMAT + 1, shiny={"new": True})
    assert RunRecord.from_dict(data).to_dict()["shiny"] == {"new": True}


def test_an_ended_0_3_record_is_replayed_by_an_agent():
    store = MemoryHistoryStore()
    for message in ({"role": "user", "content": "go"},
                    {"role": "assistant", "content": [use("c1")], "stop_reason": "tool_use"},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                                  "content": "charged 1"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "done"}]}):
        store.append(message)
    store.runs["job-7"] = dict(RECORD_0_3_ENDED)
    world = World()
    result = world.agent(store).prompt("go", run_id="job-7")
    assert result.replayed and result.result == "done" and result.num_turns == 2
    assert result.usage.input_tokens == 20 and world.requests == [] and world.effects == []


def test_a_running_0_3_record_is_resumed():
    store = MemoryHistoryStore()
    store.append({"role": "user", "content": "go"})
    store.append(reply(use("c1")))
    store.runs["r"] = {"run_id": "r", "state": "running", "prompt": "go", "index": 0,
                       "started_at": 1.0, "updated_at": 1.0, "started_calls": {}}
    world = World()
    result = world.agent(store).prompt("go", run_id="r")
    assert result.subtype == "success" and not result.replayed
    assert [e[0] for e in world.effects] == ["charge"] and result.num_turns == 2


DAMAGED = {
    "not a dict": ["r"],
    "no state": {"run_id": "r", "prompt": "go", "index": 0},
    "no prompt": {"run_id": "r", "state": "running", "index": 0},
    "unknown state": {"run_id": "r", "state": "paused", "prompt": "go", "index": 0},
    "ended without a result": {"run_id": "r", "state": "ended", "prompt": "go", "index": 0},
    "ended with an unknown subtype": {"run_id": "r", "state": "ended", "prompt": "go",
                                      "index": 0, "result": {"subtype": "fine"}},
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_record_is_an_error_naming_the_run_and_the_store(damage):
    with pytest.raises(DamagedRecord):
        RunRecord.from_dict(DAMAGED[damage])

    class Store(MemoryHistoryStore):  # gives the damaged value back as it is
        def load_run(self, run_id):
            return DAMAGED[damage] if run_id == "r" else None

    store = Store()
    store.append({"role": "user", "content": "go"})
    world = World()
    with pytest.raises(HistoryStoreError, match=r"'r'.*damaged.*MemoryHistoryStore"):
        world.agent(store).prompt("go", run_id="r")
    assert world.requests == [] and world.effects == []  # neither run again nor replayed
    assert store.messages == [{"role": "user", "content": "go"}] and store.runs == {}


def test_a_sqlite_record_that_does_not_parse_is_an_error_not_a_new_run(tmp_path):
    path = str(tmp_path / "s.db")
    world = World()
    store = SqliteHistoryStore(path, session_id="s")
    assert world.agent(store).prompt("go", run_id="r").subtype == "success"
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE lattice_runs SET record = '{not json' WHERE run_id = 'r'")
    requests = len(world.requests)
    with pytest.raises(HistoryStoreError, match=r"'r'.*s\.db"):
        world.agent(SqliteHistoryStore(path, session_id="s")).prompt("go", run_id="r")
    assert len(world.requests) == requests
