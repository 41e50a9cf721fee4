"""SPEC 18 on the Agent's side: a query whose session lock was taken over raises
LockLostError, writes nothing more, and the Agent reloads before its next query."""

import pytest

import lattice.stores.sqlite_lease as lease
from lattice import Agent, LockLostError, SqliteHistoryStore, tool
from lattice.testing import FunctionModelClient, history_problems


@pytest.fixture
def short_lease(monkeypatch):
    monkeypatch.setattr(lease, "TTL_S", 0.5)
    monkeypatch.setattr(lease, "RENEW_S", 0.05)
    monkeypatch.setattr(lease, "_renewer", lease._Renewer())


def model(request):
    if sum(1 for m in request.messages if m["role"] == "assistant") == 0:
        return {"content": [{"type": "tool_use", "id": "t1", "name": "stall", "input": {}}]}
    return "done"


def other_writer(path, text):
    store = SqliteHistoryStore(path, "s")
    with store.lock(wait_s=30):
        store.append({"role": "user", "content": text})
        store.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})


@pytest.mark.parametrize("renewal_sees_it", [False, True])
def test_a_query_outlived_by_its_lease_raises_lock_lost_and_writes_nothing_more(
        tmp_path, short_lease, renewal_sees_it):
    path = tmp_path / "h.db"

    @tool
    def stall() -> str:
        """Stall like a process paused past its lease."""
        lease._renewer._held.clear()  # no more renewals, as in a stopped process
        other_writer(path, "another process")  # takes the session once the lease expired
        if renewal_sees_it:  # a renewal now finds the lease taken: the next step ends it
            for held in list(lease._renewer._held.values()):
                held.lost = True
        return "stalled"

    agent = Agent(model="m", model_client=FunctionModelClient(model), tools=[stall],
                  history_store=SqliteHistoryStore(path, "s", fail_on_error=False))
    with pytest.raises(LockLostError):
        agent.prompt("go")
    stored = SqliteHistoryStore(path, "s").load()
    assert [m["content"] for m in stored if m["role"] == "user"][-1] == "another process"
    assert not any(isinstance(m["content"], list) and m["content"][0].get("type") ==
                   "tool_result" for m in stored)  # the stale result never landed
    assert agent.prompt("again").subtype == "success"
    history = agent.get_history()
    assert history_problems(history) == []
    assert "another process" in repr(history)  # reloaded before the query
