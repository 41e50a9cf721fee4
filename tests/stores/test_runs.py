"""Run records (SPEC 17, 21a) on every store: load_run / save_run / list_runs, kept apart
from the messages, the journal inside the record, and the version moving with them."""

import json
import os

import pytest
from store_kinds import PROCESS_KINDS, assistant, backend_for, user

from lattice import JsonlHistoryStore, define_history_store
from lattice.stores.runs import RUN_KEY, records_runs

ALL_KINDS = PROCESS_KINDS + ("memory",)


@pytest.fixture(params=ALL_KINDS)
def backend(request, tmp_path):
    yield from backend_for(request, tmp_path)


@pytest.fixture(params=("sqlite", "postgres-psycopg"))
def many_sessions(request, tmp_path):
    yield from backend_for(request, tmp_path)


def record(run_id, **fields):
    return {"run_id": run_id, "state": "running", "prompt": "hi", "index": 0, **fields}


def test_a_saved_record_loads_back_from_a_fresh_store_with_its_session(backend):
    store = backend.store()
    assert store.load_run("r1") is None
    store.save_run(record("r1", started_at=100.0, started_calls={"toolu_1": 1}))
    got = backend.store().load_run("r1")
    assert got["run_id"] == "r1" and got["state"] == "running" and got["prompt"] == "hi"
    assert got["started_calls"] == {"toolu_1": 1} and got["started_at"] == 100.0
    assert isinstance(got["updated_at"], float) and got["updated_at"] > 100.0
    expected_session = {"memory": None, "jsonl": os.path.join(backend.where,
                                                              f"{backend.session}.jsonl")}
    assert got["session_id"] == expected_session.get(backend.kind, backend.session)


def test_save_run_is_an_upsert_and_the_journal_travels_in_the_record(backend):
    store = backend.store()
    store.save_run(record("r1", started_at=1.0))
    store.save_run(record("r2", started_at=2.0))
    journal = {"toolu_a": 1}
    store.save_run(record("r1", started_at=1.0, started_calls=journal))
    journal["toolu_a"] = 2
    assert backend.store().load_run("r1")["started_calls"] == {"toolu_a": 1}  # a copy
    store.save_run(record("r1", started_at=1.0, state="ended",
                          result={"subtype": "success", "result": "done"}))
    ended = backend.store().load_run("r1")
    assert ended["state"] == "ended" and ended["result"]["result"] == "done"
    listed = backend.store().list_runs()
    assert [r["run_id"] for r in listed] == ["r1", "r2"]  # one each, oldest first
    assert [r["run_id"] for r in backend.store().list_runs(state="running")] == ["r2"]
    assert [r["run_id"] for r in backend.store().list_runs(state="ended")] == ["r1"]
    for found in listed:
        assert {"run_id", "session_id", "state", "started_at", "updated_at"} <= set(found)


def test_run_records_never_appear_among_the_messages(backend):
    store = backend.store()
    store.append(user("hi"))
    store.save_run(record("r1", prompt="hi"))
    store.append(assistant("hello"))
    store.save_run(record("r1", state="ended"))
    assert backend.store().load() == [user("hi"), assistant("hello")]
    store.replace([user("summary")])  # compaction keeps the runs
    assert backend.store().load() == [user("summary")]
    assert backend.store().load_run("r1")["state"] == "ended"


def test_the_version_changes_when_a_run_record_changes(backend):
    store = backend.store()
    store.append(user("hi"))
    seen = [store.version()]
    for state in ("running", "running", "ended"):
        store.save_run(record("r1", state=state))
        now = backend.store().version()
        assert now == store.version() and now not in seen
        seen.append(now)
    store.append(assistant("again"))
    assert backend.store().version() not in seen


def test_bad_records_and_states_are_refused_before_any_io(backend):
    store = backend.store()
    for bad in ({"state": "running"}, {"run_id": ""}, {"run_id": 5}, ["run_id"]):
        with pytest.raises(TypeError, match="run"):
            store.save_run(bad)
    with pytest.raises(TypeError):
        store.save_run(record("r1", prompt=object()))
    with pytest.raises(ValueError, match="state"):
        store.list_runs(state=3)
    assert store.list_runs() == [] and store.load() == []


def test_all_sessions_lists_the_runs_of_every_session(many_sessions):
    b = many_sessions
    b.store().save_run(record("mine", started_at=1.0))
    b.store("other-" + b.session).save_run(record("theirs", started_at=2.0, state="ended"))
    assert [r["run_id"] for r in b.store().list_runs()] == ["mine"]
    every = b.store().list_runs(all_sessions=True)
    ours = [(r["run_id"], r["session_id"]) for r in every
            if r["session_id"] in (b.session, "other-" + b.session)]
    assert ours == [("mine", b.session), ("theirs", "other-" + b.session)]
    running = b.store().list_runs(state="running", all_sessions=True)
    assert "theirs" not in [r["run_id"] for r in running]


def test_jsonl_keeps_records_as_lines_an_older_reader_skips(tmp_path):
    from lattice.stores import is_message

    store = JsonlHistoryStore(tmp_path / "h.jsonl")
    store.append(user("hi"))
    store.save_run(record("r1"))
    store.save_run(record("r1", state="ended"))
    lines = [json.loads(line) for line in (tmp_path / "h.jsonl").read_text().splitlines()]
    assert lines[0] == user("hi")
    assert [line[RUN_KEY]["state"] for line in lines[1:]] == ["running", "ended"]
    assert not any(is_message(line) for line in lines[1:])
    # compaction writes each run's last record once
    store.replace([user("summary")])
    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])[RUN_KEY]["state"] == "ended"


def test_define_history_store_takes_the_three_run_callables():
    saved = {}
    store = define_history_store(
        load=lambda: [], load_run=saved.get,
        save_run=lambda r: saved.__setitem__(r["run_id"], r),
        list_runs=lambda state=None: [r for r in saved.values()
                                      if state is None or r["state"] == state])
    assert records_runs(store)
    store.save_run(record("r1"))
    assert store.load_run("r1")["run_id"] == "r1" and len(store.list_runs("running")) == 1
    assert "load_run" in repr(store)
    assert not records_runs(define_history_store(load=lambda: []))
    with pytest.raises(ValueError, match="go together"):
        define_history_store(load_run=saved.get)
    with pytest.raises(ValueError, match="save_run"):
        define_history_store(load_run=saved.get, save_run=5, list_runs=list)


def test_the_built_in_stores_record_runs(tmp_path):
    from lattice import MemoryHistoryStore, SqliteHistoryStore

    for store in (MemoryHistoryStore(), JsonlHistoryStore(tmp_path / "a.jsonl"),
                  SqliteHistoryStore(tmp_path / "a.db", "s")):
        assert records_runs(store), store
    assert not os.path.exists(tmp_path / "a.jsonl")  # asking did no I/O


def test_a_message_and_a_run_record_are_written_at_once(many_sessions):
    """``append_and_save_run``: both or neither, in one statement (PostgreSQL) or one
    transaction (SQLite); the version moves; fenced like ``append`` while locked."""
    store = many_sessions.store()
    store.append(user("go"))
    before = store.version()
    store.append_and_save_run(assistant("calls a tool"), record("r", started_calls={"t1": 1}))
    assert store.load() == [user("go"), assistant("calls a tool")]
    got = store.load_run("r")
    assert got["started_calls"] == {"t1": 1} and got["state"] == "running"
    assert store.version() != before
    with store.lock():  # while locked: checked against the fence, and an update of the record
        store.append_and_save_run(user("more"), dict(got, started_calls={"t1": 1, "t2": 1}))
    assert many_sessions.store().load()[-1] == user("more")
    assert many_sessions.store().load_run("r")["started_calls"] == {"t1": 1, "t2": 1}
    with pytest.raises(TypeError):  # a bad record fails before anything is written
        store.append_and_save_run(user("never"), {"no": "run id"})
    assert store.load()[-1] == user("more")
