"""The Agent's side of SPEC section 8: load once, append everything, replace, errors."""
import json
import logging

import pytest
from helpers import (
    MODEL,
    reply,
    scripted,
    tool_use,
)

from lattice import (
    Agent,
    ConcurrentQueryError,
    HistoryStoreError,
    MemoryHistoryStore,
    Tool,
    ToolResult,
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


# -- SPEC 4 and 8 conformance ----------------------------------------------------------------


SEED = [{"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello Ada"}]}]


class Recorder:
    def __init__(self, loaded=()):
        self.loaded = list(loaded)
        self.calls = []

    def store(self, **kw):
        return define_history_store(load=self.load, append=self.append, replace=self.replace,
                                    **kw)

    def load(self):
        self.calls.append(("load",))
        return [dict(m) for m in self.loaded]

    def append(self, message):
        self.calls.append(("append", json.loads(json.dumps(message))))

    def replace(self, messages):
        self.calls.append(("replace", json.loads(json.dumps(messages))))


def test_replace_history_replaces_and_is_not_validated():
    agent, client = scripted(["first", "second"])
    agent.prompt("a")
    odd = [{"role": "assistant", "content": "starts with assistant"}]
    agent.replace_history(odd)
    assert agent.get_history() == odd
    agent.prompt("b")
    assert client.requests[1].messages == odd + [{"role": "user", "content": "b"}]


def test_replace_history_while_running_raises():
    seen = {}

    def handler(_input, context):
        try:
            context.agent.replace_history([])
        except ConcurrentQueryError as exc:
            seen["exc"] = exc
        return "ok"

    agent, _ = scripted([reply(tool_use("t", {}, "1")), "done"],
                        tools=[Tool("t", "T.", {"type": "object"}, handler)])
    agent.prompt("go")
    assert isinstance(seen["exc"], ConcurrentQueryError)
    assert len(agent.get_history()) == 4


def test_load_runs_once_lazily_and_history_continues():
    rec = Recorder(SEED)
    agent, client = scripted(["you are Ada", "still Ada"], history_store=rec.store())
    assert rec.calls == []  # nothing at construction
    agent.prompt("who am I?")
    agent.prompt("again?")
    assert [c for c in rec.calls if c[0] == "load"] == [("load",)]
    assert client.requests[0].messages[:2] == SEED
    appended = [c[1] for c in rec.calls if c[0] == "append"]
    assert SEED[0] not in appended and SEED[1] not in appended  # not appended again
    assert [m["role"] for m in appended] == ["user", "assistant", "user", "assistant"]
    assert appended[0] == {"role": "user", "content": "who am I?"}


def test_every_message_entering_history_is_appended():
    rec = Recorder()
    agent, _ = scripted([reply(tool_use("t", {}, "1")), "done"], history_store=rec.store(),
                        tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    agent.prompt("go")
    appended = [c[1] for c in rec.calls if c[0] == "append"]
    history = agent.get_history()
    assert [(m["role"], m["content"]) for m in appended] == \
        [(m["role"], m["content"]) for m in history]


def test_store_errors_logged_and_swallowed_by_default(caplog):
    def broken(message):
        raise OSError("disk full")

    store = define_history_store(append=broken)
    assert store.fail_on_error is False
    agent, _ = scripted(["fine"], history_store=store)
    with caplog.at_level(logging.DEBUG, logger="lattice"):
        r = agent.prompt("go")
    assert r.result == "fine" and len(agent.get_history()) == 2
    assert any(rec.name.startswith("lattice") for rec in caplog.records)


@pytest.mark.parametrize("failing", ["load", "append"])
def test_fail_on_error_propagates_as_history_store_error(failing):
    def broken(*args):
        raise OSError("disk full")

    store = define_history_store(**{failing: broken}, fail_on_error=True)
    assert store.fail_on_error is True
    agent, _ = scripted(["fine", "fine"], history_store=store)
    with pytest.raises(HistoryStoreError):
        agent.prompt("go")
    try:  # the guard was released
        agent.prompt("again")
    except HistoryStoreError:
        pass


def test_fail_on_error_on_replace():
    def broken(messages):
        raise OSError("read-only")

    agent, _ = scripted([], history_store=define_history_store(replace=broken,
                                                               fail_on_error=True))
    with pytest.raises(HistoryStoreError):
        agent.replace_history(SEED)


def test_plain_object_store_without_fail_on_error_attribute():
    class Plain:
        def __init__(self):
            self.messages = list(SEED)

        def load(self):
            return list(self.messages)

        def append(self, message):
            self.messages.append(message)

        def replace(self, messages):
            self.messages = list(messages)

    store = Plain()
    agent, _ = scripted(["ok"], history_store=store)
    agent.prompt("go")
    assert len(store.messages) == 4


def test_memory_store_resume():
    store = MemoryHistoryStore()
    assert store.fail_on_error is False
    a1 = Agent(model=MODEL, model_client=ScriptedModelClient(["noted"]), history_store=store)
    a1.prompt("my name is Ada")
    client = ScriptedModelClient(["Ada"])
    a2 = Agent(model=MODEL, model_client=client, history_store=store)
    a2.prompt("name?")
    assert len(client.requests[0].messages) == 3
    assert store.load() == a2.get_history()


def test_replace_history_before_first_query_wins_over_load():
    rec = Recorder(SEED)
    agent, client = scripted(["ok"], history_store=rec.store())
    new = [{"role": "user", "content": "replaced"},
           {"role": "assistant", "content": [{"type": "text", "text": "yes"}]}]
    agent.replace_history(new)
    agent.prompt("next")
    assert client.requests[0].messages == new + [{"role": "user", "content": "next"}]


def test_sdk_keys_of_loaded_or_replaced_messages_are_stripped_in_requests():
    loaded = [{"role": "user", "content": "a"},
              {"role": "assistant", "content": [{"type": "text", "text": "b"}], "model": "m",
               "provider_response_id": "msg_1", "stop_reason": "end_turn",
               "usage": {"input_tokens": 1, "output_tokens": 1}}]
    agent, client = scripted(["c", "d"], history_store=define_history_store(
        load=lambda: [dict(m) for m in loaded]))
    agent.prompt("next")
    agent.replace_history(loaded)
    agent.prompt("again")
    for request in client.requests:
        assert all(set(m) == {"role", "content"} for m in request.messages)


# -- well-formed history on every ending (SPEC 3) --------------------------------------------


def test_well_formed_after_end_turn_and_errors():
    fin = Tool("fin", "F.", {"type": "object"}, lambda i: ToolResult("bye", end_turn=True))
    agent, _ = scripted([reply(tool_use("fin", {}, "1"), tool_use("missing", {}, "2"))], tools=[fin])
    assert agent.prompt("go").result == "bye"
    assert_well_formed(agent.get_history())


@pytest.mark.parametrize("fail_at", [2, 3])
def test_store_failure_mid_query_leaves_well_formed_history(fail_at):
    from lattice import HistoryStoreError, define_history_store

    count = []

    def append(message):
        count.append(message)
        if len(count) == fail_at:
            raise OSError("disk gone")

    agent, _ = scripted([reply(tool_use("t", {}, "1")), "done", "after"],
                        tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")],
                        history_store=define_history_store(append=append, fail_on_error=True))
    with pytest.raises(HistoryStoreError):
        agent.prompt("go")
    assert_well_formed(agent.get_history())
