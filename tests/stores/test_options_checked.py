"""SPEC 21b "Options are checked, not truthy": the stores' bool options must be bools,
paths must name a file, messages must be dicts, ``follow()`` must get a store, and a corrupt
SQLite file is a ``HistoryStoreError`` (in plain use, under ``follow()`` and from an Agent),
never a raw ``sqlite3.DatabaseError``."""

import sqlite3

import pytest

import lattice
from lattice import Agent, HistoryStoreError
from lattice.stores import (
    JsonlHistoryStore,
    MemoryHistoryStore,
    PostgresHistoryStore,
    SqliteHistoryStore,
    create_jsonl_history_store,
    define_history_store,
)

NOT_BOOLS = ["no", 0, 1, 2, None, "False"]


def stores_with(tmp_path, **options):
    return [
        lambda: MemoryHistoryStore(**options),
        lambda: JsonlHistoryStore(tmp_path / "h.jsonl", **options),
        lambda: create_jsonl_history_store(tmp_path / "h.jsonl", **options),
        lambda: SqliteHistoryStore(tmp_path / "h.db", "s", **options),
        lambda: PostgresHistoryStore("host=127.0.0.1 port=1", "s", **options),
        lambda: define_history_store(**options),
    ]


@pytest.mark.parametrize("value", NOT_BOOLS)
def test_fail_on_error_must_be_a_bool(tmp_path, value):
    for make in stores_with(tmp_path, fail_on_error=value):
        with pytest.raises(ValueError, match="fail_on_error must be a bool"):
            make()


@pytest.mark.parametrize("value", NOT_BOOLS)
def test_fsync_must_be_a_bool(tmp_path, value):
    for make in (lambda: JsonlHistoryStore(tmp_path / "h.jsonl", fsync=value),
                 lambda: SqliteHistoryStore(tmp_path / "h.db", "s", fsync=value)):
        with pytest.raises(ValueError, match="fsync must be a bool"):
            make()


def test_bools_are_taken(tmp_path):
    for make in stores_with(tmp_path, fail_on_error=True):
        assert make().fail_on_error is True
    assert JsonlHistoryStore(tmp_path / "h.jsonl", fsync=True).fsync is True


@pytest.mark.parametrize("path", ["", "   "])
def test_an_empty_path_is_refused(path):
    for make in (JsonlHistoryStore, create_jsonl_history_store,
                 lambda p: SqliteHistoryStore(p, "s")):
        with pytest.raises(ValueError, match="path must name a file"):
            make(path)


def test_replace_history_takes_message_dicts_only():
    agent = Agent(model="m", model_client=lambda request: "hi")
    for bad in ([5], [{"role": "user", "content": "a"}, "b"], [None]):
        with pytest.raises(ValueError, match=r"replace_history: messages\[\d\] must be a "
                                             r"message dict"):
            agent.replace_history(bad)
    assert agent.get_history() == []


@pytest.mark.parametrize("not_a_store", [None, "h.jsonl", 5, object()])
def test_follow_takes_a_store(not_a_store):
    with pytest.raises(TypeError, match="follow\\(\\) needs a history store.*got " +
                       type(not_a_store).__name__):
        lattice.follow(not_a_store)


def corrupt_files(tmp_path):
    """A file that is not SQLite at all, and a real database whose pages were overwritten."""
    text = tmp_path / "text.db"
    text.write_bytes(b"not a database, just text " * 200)
    damaged = tmp_path / "damaged.db"
    store = SqliteHistoryStore(damaged, "s")
    for i in range(300):
        store.append({"role": "user", "content": f"message {i} " + "x" * 200})
    store.close()
    with open(damaged, "r+b") as f:
        f.seek(4096)  # past the header page: the tables' pages
        f.write(b"\xff" * 8192)
    return [text, damaged]


def test_a_corrupt_sqlite_file_is_a_history_store_error(tmp_path):
    for path in corrupt_files(tmp_path):
        store = SqliteHistoryStore(path, "s")
        operations = [
            ("load", store.load), ("version", store.version),
            ("append", lambda: store.append({"role": "user", "content": "x"})),
            ("follow", lambda: list(lattice.follow(store, wait_s=0.2)))]
        if path.name == "text.db":  # (the damaged file's other tables may still read well)
            operations += [("list_runs", store.list_runs),
                           ("lock", lambda: store.lock().__enter__())]
        for name, operation in operations:
            with pytest.raises(HistoryStoreError, match="damaged or not an SQLite database") \
                    as caught:
                operation()
            assert isinstance(caught.value.__cause__, sqlite3.DatabaseError), name


def test_an_agent_on_a_corrupt_sqlite_file_raises_history_store_error(tmp_path):
    (path, _) = corrupt_files(tmp_path)
    store = SqliteHistoryStore(path, "s", fail_on_error=True)
    agent = Agent(model="m", model_client=lambda request: "hi", history_store=store)
    with pytest.raises(HistoryStoreError):
        agent.prompt("hello")
    with pytest.raises(HistoryStoreError):
        agent.prompt("hello", run_id="run-1")
