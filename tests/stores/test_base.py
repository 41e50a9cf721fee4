"""The store protocol, stores from callables, the memory store, and the one store-failure
policy (lattice/conversation/store_link.py) applied to single store calls."""

import logging

import pytest

import lattice
import lattice.stores as stores
from lattice.conversation.history import History
from lattice.conversation.store_link import StoreLink
from lattice.errors import HistoryStoreError
from lattice.stores import (
    HistoryStore,
    JsonlHistoryStore,
    MemoryHistoryStore,
    SqliteHistoryStore,
    define_history_store,
)
from lattice.stores.base import encode_message


def call_store(store, method, *args):
    """One store call under the Agent's failure policy."""
    return StoreLink(store, History()).save(method, *args)


def test_public_surface():
    assert sorted(stores.__all__) == sorted([
        "HistoryStore", "define_history_store", "create_jsonl_history_store",
        "JsonlHistoryStore", "SqliteHistoryStore", "MemoryHistoryStore",
        "repair_history", "PostgresHistoryStore", "is_message",
    ])
    for name in stores.__all__:
        assert getattr(stores, name) is not None


def test_every_store_satisfies_the_protocol(tmp_path):
    made = [
        MemoryHistoryStore(),
        define_history_store(),
        JsonlHistoryStore(tmp_path / "h.jsonl"),
        SqliteHistoryStore(tmp_path / "h.db", "s"),
    ]
    for store in made:
        assert isinstance(store, HistoryStore)
        assert store.fail_on_error is False

    class NoReplace:
        fail_on_error = False

        def load(self):
            return []

        def append(self, message):
            pass

    assert not isinstance(NoReplace(), HistoryStore)


# -- define_history_store -----------------------------------------------------------


def test_defined_store_without_callables_loads_nothing_and_ignores_writes():
    store = define_history_store()
    assert store.load() == []
    store.append({"role": "user", "content": "hi"})
    store.replace([])
    assert store.load() == []
    assert store.fail_on_error is False
    assert define_history_store(fail_on_error=True).fail_on_error is True


def test_defined_store_calls_the_callables():
    calls = []
    store = define_history_store(
        load=lambda: [{"role": "user", "content": "old"}],
        append=lambda m: calls.append(("append", m)),
        replace=lambda ms: calls.append(("replace", ms)),
    )
    assert store.load() == [{"role": "user", "content": "old"}]
    store.append({"role": "user", "content": "a"})
    store.replace([{"role": "user", "content": "b"}])
    assert calls == [
        ("append", {"role": "user", "content": "a"}),
        ("replace", [{"role": "user", "content": "b"}]),
    ]


def test_defined_store_load_returning_none_or_an_iterable():
    assert define_history_store(load=lambda: None).load() == []
    gen = define_history_store(load=lambda: (m for m in [{"role": "user", "content": "x"}]))
    assert gen.load() == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("name", ["load", "append", "replace"])
def test_defined_store_rejects_non_callables_naming_the_argument(name):
    with pytest.raises(ValueError, match=name):
        define_history_store(**{name: "not callable"})


# -- MemoryHistoryStore -------------------------------------------------------------


def test_memory_store_keeps_deep_copies():
    initial = [{"role": "user", "content": [{"type": "text", "text": "one"}]}]
    store = MemoryHistoryStore(initial)
    initial[0]["content"][0]["text"] = "changed"
    message = {"role": "assistant", "content": [{"type": "text", "text": "two"}]}
    store.append(message)
    message["content"][0]["text"] = "changed"
    loaded = store.load()
    assert [m["content"][0]["text"] for m in loaded] == ["one", "two"]
    loaded[0]["content"][0]["text"] = "changed"
    assert store.messages[0]["content"][0]["text"] == "one"


def test_memory_store_replace_keeps_the_inspected_list():
    store = MemoryHistoryStore([{"role": "user", "content": "a"}])
    seen = store.messages
    new = [{"role": "user", "content": "b"}]
    store.replace(new)
    new[0]["content"] = "changed"
    assert seen == [{"role": "user", "content": "b"}]
    assert store.load() == [{"role": "user", "content": "b"}]
    assert "1 messages" in repr(store)


# -- the failure policy, one call at a time -----------------------------------------------------------------------


class Failing:
    def __init__(self, fail_on_error):
        self.fail_on_error = fail_on_error

    def load(self):
        raise OSError("disk on fire")

    def append(self, message):
        raise TypeError("not serialisable")


def test_call_store_returns_the_result():
    store = MemoryHistoryStore([{"role": "user", "content": "a"}])
    assert call_store(store, "load") == [{"role": "user", "content": "a"}]
    assert call_store(store, "append", {"role": "user", "content": "b"}) is None
    assert len(store.messages) == 2


def test_call_store_swallows_and_logs_by_default(caplog):
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert call_store(Failing(False), "load") is None
        assert call_store(Failing(False), "append", {}) is None
    records = [r for r in caplog.records if r.name == "lattice"]
    assert len(records) == 2
    assert "load" in records[0].getMessage()
    assert records[0].exc_info and isinstance(records[0].exc_info[1], OSError)
    assert isinstance(records[1].exc_info[1], TypeError)


def test_call_store_raises_history_store_error_with_the_cause():
    with pytest.raises(HistoryStoreError,
                       match="history store load failed: disk on fire") as info:
        call_store(Failing(True), "load")
    assert isinstance(info.value.__cause__, OSError)
    assert isinstance(info.value, lattice.LatticeError)


def test_call_store_with_a_real_failing_store(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    made = [JsonlHistoryStore(blocker / "h.jsonl"), SqliteHistoryStore(blocker / "h.db", "s")]
    for store in made:
        with caplog.at_level(logging.WARNING, logger="lattice"):
            assert call_store(store, "append", {"role": "user", "content": "x"}) is None
        store.fail_on_error = True
        with pytest.raises(HistoryStoreError) as info:
            call_store(store, "append", {"role": "user", "content": "x"})
        assert isinstance(info.value.__cause__, OSError)


def test_call_store_policy_for_an_object_without_the_method_or_flag(caplog):
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert call_store(object(), "load") is None
    assert any("load" in r.getMessage() for r in caplog.records)


# -- encoding -----------------------------------------------------------------------


def test_encode_message_is_compact_utf8_and_survives_lone_surrogates():
    import json

    assert encode_message({"a": "é", "b": [1, 2]}) == '{"a":"é","b":[1,2]}'.encode()
    odd = {"content": "bad \udcff byte"}
    assert json.loads(encode_message(odd)) == odd
    with pytest.raises(TypeError):
        encode_message(["not", "a", "dict"])
    with pytest.raises(TypeError):
        encode_message({"x": object()})
