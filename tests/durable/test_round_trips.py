"""A durable prompt() makes no more store round trips than it needs (issue 33): against a
plain one, the read of the run's record before the lock (is it new, ended, running?) and
the write of its end. The record of a new run rides with its prompt, a call's journal
entry with the reply that asks for it (one write each, on JSONL as on SQLite, which writes
the entry alone); under the
lock the record is not read again when the store's version shows nobody wrote since."""

import collections
import os

import pytest
from durable_world import use

from lattice import Agent, SqliteHistoryStore, create_jsonl_history_store, tool
from lattice.testing import FunctionModelClient


class Counting:
    """A store seen through a proxy that counts each call by name."""

    def __init__(self, store):
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "calls", collections.Counter())

    def __getattr__(self, name):
        value = getattr(self._store, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def two_turns(request):
    if len(request.messages) % 4 == 1:  # a prompt: ask for the tool, then answer
        return {"content": [use(f"t{len(request.messages)}", "add", a=1, b=2)],
                "stop_reason": "tool_use"}
    return "3"


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_durable_prompt_costs_two_store_calls_more_than_a_plain_one(kind, tmp_path):
    counts = {}
    for durable in (False, True):
        path = os.path.join(tmp_path, f"{durable}.{kind}")
        store = Counting(create_jsonl_history_store(path) if kind == "jsonl"
                         else SqliteHistoryStore(path, session_id="s"))
        agent = Agent(model="m", model_client=FunctionModelClient(two_turns), tools=[add],
                      history_store=store)
        options = {"run_id": "warm"} if durable else {}
        assert agent.prompt("first", **options).subtype == "success"  # loads the store
        store.calls.clear()
        options = {"run_id": "r"} if durable else {}
        assert agent.prompt("second", **options).subtype == "success"
        counts[durable] = dict(store.calls)
    assert sum(counts[False].values()) == 7, counts  # lock, 2 versions, 4 appends
    assert sum(counts[True].values()) == 9, counts
    assert counts[True]["load_run"] == 1 and "list_runs" not in counts[True]
    if kind == "sqlite":  # the journal entry alone, with its reply (#39)
        assert counts[True]["append_and_save_run"] == 1, counts
        assert counts[True]["append_and_save_calls"] == 1 and counts[True]["save_run"] == 1
    else:
        assert counts[True]["append_and_save_run"] == 2 and counts[True]["save_run"] == 1
