"""SPEC conformance: history access (section 4) and history stores (section 8)."""

import json
import logging
import os
import stat

import pytest
from helpers import MODEL, assert_well_formed, reply, scripted, tool_use

from lattice import (
    Agent,
    ConcurrentQueryError,
    HistoryStoreError,
    JsonlHistoryStore,
    MemoryHistoryStore,
    SqliteHistoryStore,
    Tool,
    create_jsonl_history_store,
    define_history_store,
)
from lattice.testing import ScriptedModelClient

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


# -- section 4 -----------------------------------------------------------------------------------

def test_replace_history_replaces_and_is_not_validated():
    agent, client = scripted(["first", "second"])
    agent.prompt("a")
    odd = [{"role": "assistant", "content": "starts with assistant"}]
    agent.replace_history(odd)
    assert agent.get_history() == odd
    agent.prompt("b")
    assert client.requests[1].messages == odd + [{"role": "user", "content": "b"}]


def test_replace_history_calls_store_replace():
    rec = Recorder()
    agent, _ = scripted([], history_store=rec.store())
    agent.replace_history(SEED)
    assert ("replace", SEED) in rec.calls


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


# -- define_history_store and the protocol -------------------------------------------------------

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


# -- JSONL ---------------------------------------------------------------------------------------

def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_jsonl_store_end_to_end(tmp_path):
    folder = tmp_path / "sessions" / "deep"
    path = folder / "ada.jsonl"
    store = create_jsonl_history_store(str(path))
    assert store.fail_on_error is False
    assert not folder.exists()  # no I/O at construction
    agent = Agent(model=MODEL, model_client=ScriptedModelClient([
        reply("hi", model="m1", provider_response_id="msg_1")]), history_store=store)
    assert not folder.exists()
    agent.prompt("hello")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_lines(path) == agent.get_history()
    assert set(os.listdir(folder)) <= {"ada.jsonl", "ada.jsonl.lock"}

    client = ScriptedModelClient(["resumed"])
    again = Agent(model=MODEL, model_client=client,
                  history_store=JsonlHistoryStore(path))  # a new Agent, same file
    again.prompt("still there?")
    assert len(client.requests[0].messages) == 3
    assert len(read_lines(path)) == 4  # loaded messages not appended again
    again.replace_history(SEED)
    assert read_lines(path) == SEED
    assert set(os.listdir(folder)) <= {"ada.jsonl", "ada.jsonl.lock"}


def test_jsonl_fail_on_error_flag(tmp_path):
    store = create_jsonl_history_store(tmp_path / "x.jsonl", fail_on_error=True)
    assert store.fail_on_error is True
    assert JsonlHistoryStore(tmp_path / "y.jsonl", fail_on_error=True).fail_on_error is True


def test_jsonl_load_skips_corrupt_and_truncated_lines(tmp_path):
    path = tmp_path / "h.jsonl"
    lines = [json.dumps(SEED[0]), "{not json", json.dumps(SEED[1])]
    path.write_text("\n".join(lines) + "\n" + '{"role": "user", "content": "cut sh')
    store = JsonlHistoryStore(path)
    assert store.load() == SEED
    client = ScriptedModelClient(["ok"])
    agent = Agent(model=MODEL, model_client=client, history_store=store)
    agent.prompt("next")
    assert client.requests[0].messages[:2] == SEED
    assert JsonlHistoryStore(path).load() == agent.get_history()


def test_jsonl_errors_surface_from_operations_not_construction(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = blocker / "sub" / "h.jsonl"  # parent is a file
    failing = create_jsonl_history_store(bad, fail_on_error=True)
    agent = Agent(model=MODEL, model_client=ScriptedModelClient(["x"]), history_store=failing)
    with pytest.raises(HistoryStoreError):
        agent.prompt("go")

    quiet = create_jsonl_history_store(bad)
    agent = Agent(model=MODEL, model_client=ScriptedModelClient(["x"]), history_store=quiet)
    with caplog.at_level(logging.DEBUG, logger="lattice"):
        assert agent.prompt("go").result == "x"
    assert any(rec.name.startswith("lattice") for rec in caplog.records)


# -- SQLite --------------------------------------------------------------------------------------

def test_sqlite_sessions(tmp_path):
    path = tmp_path / "db" / "sessions.sqlite"
    s1 = SqliteHistoryStore(str(path), "alice")
    s2 = SqliteHistoryStore(str(path), "bob")
    assert s1.fail_on_error is False
    assert not path.exists() and not path.parent.exists()
    Agent(model=MODEL, model_client=ScriptedModelClient(["hi alice"]), history_store=s1) \
        .prompt("I am alice")
    Agent(model=MODEL, model_client=ScriptedModelClient(["hi bob"]), history_store=s2) \
        .prompt("I am bob")
    client = ScriptedModelClient(["alice again"])
    resumed = Agent(model=MODEL, model_client=client,
                    history_store=SqliteHistoryStore(path, "alice"))
    resumed.prompt("who?")
    sent = client.requests[0].messages
    assert sent[0] == {"role": "user", "content": "I am alice"} and len(sent) == 3
    assert SqliteHistoryStore(path, "bob").load()[0]["content"] == "I am bob"
    assert SqliteHistoryStore(path, "alice", fail_on_error=True).fail_on_error is True
    resumed.replace_history(SEED)
    assert SqliteHistoryStore(path, "alice").load() == SEED
    assert_well_formed(SqliteHistoryStore(path, "bob").load())


def test_replace_history_before_first_query_wins_over_load():
    rec = Recorder(SEED)
    agent, client = scripted(["ok"], history_store=rec.store())
    new = [{"role": "user", "content": "replaced"},
           {"role": "assistant", "content": [{"type": "text", "text": "yes"}]}]
    agent.replace_history(new)
    agent.prompt("next")
    assert client.requests[0].messages == new + [{"role": "user", "content": "next"}]


def test_jsonl_file_tracks_history_through_every_ending(tmp_path):
    from lattice import AbortController

    path = tmp_path / "h.jsonl"
    t = Tool("t", "T.", {"type": "object"}, lambda i: "ran")
    agent = Agent(model=MODEL, tools=[t], history_store=JsonlHistoryStore(path),
                  model_client=ScriptedModelClient([
                      reply(tool_use("t", {}, "1")), "done",  # a tool loop
                      reply(tool_use("t", {}, "2")),  # closed while holding it
                      reply(tool_use("t", {}, "3")),  # interrupted while holding it
                      "last"]))
    agent.prompt("one")
    assert read_lines(path) == agent.get_history()
    gen = agent.query("two")
    next(gen)
    gen.close()
    assert read_lines(path) == agent.get_history()
    controller = AbortController()
    controller.abort()
    agent.prompt("three", signal=controller.signal)
    assert read_lines(path) == agent.get_history()
    gen = agent.query("four")
    next(gen)
    agent.interrupt()
    list(gen)
    assert read_lines(path) == agent.get_history()
    agent.prompt("five")
    assert read_lines(path) == agent.get_history()
    assert_well_formed(agent.get_history())


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


def test_jsonl_concurrent_appends_from_processes_never_interleave(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "shared.jsonl"
    code = ("import sys\nfrom lattice import JsonlHistoryStore\n"
            "s = JsonlHistoryStore(sys.argv[1])\n"
            "for i in range(150):\n"
            "    s.append({'role': 'user', 'content': sys.argv[2] * 300 + str(i)})\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), tag]) for tag in "abc"]
    for p in procs:
        assert p.wait(60) == 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) == 450
    for line in lines:
        message = json.loads(line)
        assert len(set(message["content"].rstrip("0123456789"))) == 1
    assert len(JsonlHistoryStore(path).load()) == 450


def test_sqlite_uses_wal(tmp_path):
    import sqlite3

    path = tmp_path / "s.sqlite"
    Agent(model=MODEL, model_client=ScriptedModelClient(["x"]),
          history_store=SqliteHistoryStore(path, "s")).prompt("go")
    with sqlite3.connect(str(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
