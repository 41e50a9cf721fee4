"""SPEC 14 through the Agent: the store's session lock held for each query, and a stale
history reloaded."""

from __future__ import annotations

import threading

import pytest

from lattice import Agent, ConcurrentQueryError
from lattice.stores import JsonlHistoryStore, SqliteHistoryStore
from lattice.testing import ScriptedModelClient, assert_well_formed


def stores(tmp_path, kind):
    if kind == "jsonl":
        return lambda: JsonlHistoryStore(tmp_path / "c.jsonl")
    return lambda: SqliteHistoryStore(tmp_path / "c.db", "s1")


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_two_agents_on_one_session_never_run_together(tmp_path, kind):
    make = stores(tmp_path, kind)
    entered, release = threading.Event(), threading.Event()

    def slow(request):
        entered.set()
        release.wait(10)
        return "first"

    first = Agent(model="m", model_client=slow, history_store=make())
    worker = threading.Thread(target=first.prompt, args=("one",))
    worker.start()
    assert entered.wait(10)
    second = Agent(model="m", model_client=ScriptedModelClient(["second"]),
                   history_store=make())
    with pytest.raises(ConcurrentQueryError):
        second.prompt("two")
    waiter = Agent(model="m", model_client=ScriptedModelClient(["waited"]),
                   history_store=make(), session_lock_wait_s=10)
    threading.Timer(0.2, release.set).start()
    assert waiter.prompt("three").result == "waited"  # waits for the first to finish
    worker.join(10)
    history = waiter.get_history()
    assert [m["content"] for m in history if m["role"] == "user"] == ["one", "three"]
    assert_well_formed(history)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_long_lived_agent_reloads_a_history_another_agent_changed(tmp_path, kind):
    make = stores(tmp_path, kind)
    a = Agent(model="m", model_client=ScriptedModelClient(["a1", "a2"]), history_store=make())
    b = Agent(model="m", model_client=ScriptedModelClient(["b1"]), history_store=make())
    a.prompt("from a")
    b.prompt("from b")
    a.prompt("a again")
    contents = [m["content"] for m in a.get_history() if m["role"] == "user"]
    assert contents == ["from a", "from b", "a again"]
    reloaded = Agent(model="m", model_client=ScriptedModelClient([]), history_store=make())
    assert reloaded.get_history() == a.get_history()


def test_bad_session_lock_wait():
    with pytest.raises(ValueError, match="session_lock_wait_s"):
        Agent(model="m", model_client=ScriptedModelClient([]), session_lock_wait_s=-1)
