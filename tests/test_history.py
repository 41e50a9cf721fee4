"""The Agent's side of SPEC section 8: load once, append everything, replace, errors."""
import logging

import pytest
from helpers import reply, tool_use

from lattice import (
    Agent,
    HistoryStoreError,
    MemoryHistoryStore,
    Tool,
    create_jsonl_history_store,
    define_history_store,
)
from lattice.testing import ScriptedModelClient, assert_well_formed

echo = Tool("echo", "Echo.", {"type": "object"}, lambda a: "echoed")


class CountingStore(MemoryHistoryStore):
    def __init__(self, messages=None):
        super().__init__(messages)
        self.loads = 0
        self.appended = []
        self.replaced = []

    def load(self):
        self.loads += 1
        return super().load()

    def append(self, message):
        self.appended.append(message)
        super().append(message)

    def replace(self, messages):
        self.replaced.append(messages)
        super().replace(messages)


def test_load_once_lazily_and_every_message_appended():
    store = CountingStore([{"role": "user", "content": "earlier"},
                           {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}])
    client = ScriptedModelClient([reply(tool_use("echo", {}, "t1")), "done", "again"])
    agent = Agent(model="m", model_client=client, tools=[echo], history_store=store)
    assert store.loads == 0  # lazily
    agent.prompt("now")
    agent.prompt("more")
    assert store.loads == 1
    assert [m["role"] for m in store.appended] == ["user", "assistant", "user", "assistant",
                                                   "user", "assistant"]
    assert client.requests[0].messages[0]["content"] == "earlier"  # continued from the load
    assert store.load() == agent.get_history()  # loaded messages not appended again


def test_replace_history_calls_store_replace():
    store = CountingStore()
    agent = Agent(model="m", model_client=ScriptedModelClient(["a"]), history_store=store)
    new = [{"role": "user", "content": "seed"}]
    agent.replace_history(new)
    assert store.replaced == [new] and agent.get_history() == new


def test_store_errors_swallowed_by_default(caplog):
    def broken(*args):
        raise OSError("disk full")

    store = define_history_store(load=lambda: [], append=broken, replace=broken)
    agent = Agent(model="m", model_client=ScriptedModelClient(["ok"]), history_store=store)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert agent.prompt("x").result == "ok"
    assert "disk full" in caplog.text
    assert len(agent.get_history()) == 2  # the conversation continued in memory


def test_store_errors_raise_with_fail_on_error():
    def broken(message):
        raise OSError("disk full")

    store = define_history_store(load=lambda: [], append=broken, fail_on_error=True)
    agent = Agent(model="m", model_client=ScriptedModelClient(["ok", "ok"]), history_store=store)
    with pytest.raises(HistoryStoreError) as info:
        agent.prompt("x")
    assert isinstance(info.value.__cause__, OSError)
    agent.replace_history([])  # guard released


def test_failing_load_with_fail_on_error_raises_and_retries():
    calls = []

    def load():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("not mounted yet")
        return [{"role": "user", "content": "old"},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}]}]

    store = define_history_store(load=load, fail_on_error=True)
    client = ScriptedModelClient(["ok"])
    agent = Agent(model="m", model_client=client, history_store=store)
    with pytest.raises(HistoryStoreError):
        agent.prompt("x")
    agent.prompt("y")
    assert client.requests[0].messages[0]["content"] == "old"


def test_resume_repairs_cut_transcript_and_appends_repair(tmp_path):
    path = tmp_path / "s.jsonl"
    store = create_jsonl_history_store(path)
    store.append({"role": "user", "content": "start"})
    store.append({"role": "assistant", "content": [tool_use("echo", {}, "t1"),
                                                   tool_use("echo", {}, "t2")]})
    client = ScriptedModelClient(["resumed"])
    agent = Agent(model="m", model_client=client, tools=[echo],
                  history_store=create_jsonl_history_store(path))
    assert agent.prompt("continue").result == "resumed"
    sent = client.requests[0].messages
    assert_well_formed(sent)
    assert [b["tool_use_id"] for b in sent[2]["content"]] == ["t1", "t2"]
    assert all(b["is_error"] for b in sent[2]["content"])
    assert create_jsonl_history_store(path).load() == agent.get_history()


def test_jsonl_resume_in_new_agent(tmp_path):
    path = tmp_path / "chat.jsonl"
    first = Agent(model="m", model_client=ScriptedModelClient(["Hi Ada"]),
                  history_store=create_jsonl_history_store(path))
    first.prompt("I am Ada")
    client = ScriptedModelClient(["You are Ada"])
    second = Agent(model="m", model_client=client, history_store=create_jsonl_history_store(path))
    second.prompt("Who am I?")
    assert [m["content"] for m in client.requests[0].messages][0] == "I am Ada"
    assert len(client.requests[0].messages) == 3
