"""The message-shape rule, the JSONL byte-order mark, store errors that name their file, and
the Agent-side helpers for the optional lock/version capabilities."""

import logging
import os
import sqlite3
import threading

import pytest

from lattice import (
    Agent,
    ConcurrentQueryError,
    HistoryStoreError,
    JsonlHistoryStore,
    SqliteHistoryStore,
    define_history_store,
)
from lattice.conversation.history import History
from lattice.conversation.store_link import StoreLink
from lattice.stores import is_message
from lattice.stores.session import hold_session
from lattice.testing import ScriptedModelClient


def call_store(store, method, *args):
    """One store call under the Agent's failure policy (lattice/conversation/store_link.py)."""
    return StoreLink(store, History()).save(method, *args)


@pytest.mark.parametrize("value", [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": []},
    {"role": "user", "content": [{"type": "text", "text": "x"}], "extra": 1},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
    {"role": "user", "content": [{"type": "something_new"}]},
])
def test_messages(value):
    assert is_message(value)


@pytest.mark.parametrize("value", [
    None, "text", 5, [], {"content": "x"}, {"role": "robot", "content": "x"},
    {"role": "user", "content": 5}, {"role": "user", "content": None}, {"role": "user"},
    {"role": ["user"], "content": "x"},
    {"role": "assistant", "content": ["a string block"]},
    {"role": "assistant", "content": [{"type": 3}]},
    {"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": 7, "name": "f"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t"}]},
    {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
    {"role": "user", "content": [{"type": "text", "text": "ok"}, "bad"]},
])
def test_not_messages(value):
    assert not is_message(value)


def test_a_bom_does_not_cost_the_first_message(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"role": "user", "content": "first"}\n'
                     b'{"role": "assistant", "content": "second"}\n')
    assert [m["content"] for m in JsonlHistoryStore(path).load()] == ["first", "second"]


def test_an_agent_on_a_file_with_a_non_message_line_works(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    path.write_text('{"content": "x"}\n{"role": "user", "content": "hello"}\n'
                    '{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}\n')
    agent = Agent(model="m", model_client=ScriptedModelClient(["fine"]),
                  history_store=JsonlHistoryStore(path))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert [m["content"] for m in agent.get_history()][0] == "hello"
        assert agent.prompt("again").result == "fine"
    assert str(path) in caplog.text


def test_callable_store_loads_are_filtered_too(caplog):
    store = define_history_store(load=lambda: [{"role": "robot", "content": "x"},
                                               {"role": "user", "content": "ok"}])
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert store.load() == [{"role": "user", "content": "ok"}]
    assert "1 not a history message" in caplog.text


# -- errors name the file -----------------------------------------------------------------


def test_a_jsonl_write_error_names_the_file(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    path = tmp_path / "h.jsonl"
    os.symlink("/dev/full", path)
    with pytest.raises(OSError) as info:
        JsonlHistoryStore(path).append({"role": "user", "content": "x"})
    assert str(path) in str(info.value)
    strict = JsonlHistoryStore(path, fail_on_error=True)
    with pytest.raises(HistoryStoreError) as wrapped:
        call_store(strict, "append", {"role": "user", "content": "x"})
    assert str(path) in str(wrapped.value)


def test_a_sqlite_error_names_the_database_and_session(tmp_path, caplog):
    path = tmp_path / "h.db"
    path.write_bytes(b"this is not a database" * 100)
    store = SqliteHistoryStore(path, "ada")
    with pytest.raises(HistoryStoreError) as info:  # a file that is not SQLite (SPEC 21b)
        store.append({"role": "user", "content": "x"})
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    assert str(path) in str(info.value) and "'ada'" in str(info.value)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert call_store(store, "load") is None
    assert str(path) in caplog.text and "ada" in caplog.text
    store.close()


# -- hold_session / stale --------------------------------------------------------------


def test_a_store_without_lock_gets_a_no_op_hold():
    hold = hold_session(define_history_store())
    assert hold.held is False
    hold.release()
    assert hold_session(None).held is False


def test_hold_session_raises_busy_and_releases_once_from_any_thread(tmp_path):
    store = JsonlHistoryStore(tmp_path / "h.jsonl")
    hold = hold_session(store, 0)
    assert hold.held
    with pytest.raises(ConcurrentQueryError):
        hold_session(JsonlHistoryStore(tmp_path / "h.jsonl"))
    thread = threading.Thread(target=hold.release)  # e.g. a generator closed elsewhere
    thread.start()
    thread.join()
    hold.release()  # idempotent
    with hold_session(store) as again:
        assert again.held


class Unreachable:
    def __init__(self, fail_on_error):
        self.fail_on_error = fail_on_error

    def load(self):
        return []

    def append(self, message):
        pass

    def replace(self, messages):
        pass

    def lock(self, *, wait_s=0.0):
        raise OSError("connection refused")

    def version(self):
        raise OSError("connection refused")


def test_a_lock_that_cannot_reach_its_store_follows_fail_on_error(caplog):
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert StoreLink(Unreachable(False), History()).hold_session(0.0).held is False
    assert "without the session lock" in caplog.text
    with pytest.raises(HistoryStoreError, match="lock failed: connection refused"):
        StoreLink(Unreachable(True), History()).hold_session(0.0)
    with pytest.raises(OSError, match="connection refused"):  # the policy is History's
        hold_session(Unreachable(True))
    with pytest.raises(ValueError, match="wait_s"):
        hold_session(Unreachable(False), -1)


def test_a_failing_release_is_logged_not_raised(caplog):
    class BadRelease:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise OSError("gone")

    class Store(Unreachable):
        def lock(self, *, wait_s=0.0):
            return BadRelease()

    hold = hold_session(Store(True))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        hold.release()
    assert "releasing the session lock failed" in caplog.text


def test_stale_only_when_the_store_says_so(tmp_path, caplog):
    history = StoreLink(JsonlHistoryStore(tmp_path / "h.jsonl"), History())
    assert not history.stale()  # never read: nothing to compare with
    assert history.load() == [] and not history.stale()
    other = JsonlHistoryStore(tmp_path / "h.jsonl")
    other.append({"role": "user", "content": "x"})
    assert history.stale()
    history.load()
    assert not history.stale()
    history.append({"role": "user", "content": "mine"})  # its own write: not stale
    assert not history.stale()
    other.replace([{"role": "user", "content": "y"}])
    assert history.stale()
    # Without version, or when it cannot be read, never stale: the Agent keeps its history.
    assert not StoreLink(define_history_store(), History()).stale()
    unreachable = StoreLink(Unreachable(False), History())
    unreachable.version = "anything"
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert not unreachable.stale()
    assert "version failed" in caplog.text
