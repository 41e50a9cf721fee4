"""JsonlHistoryStore in one process: format, laziness, corruption, atomic replace, threads."""

import json
import logging
import multiprocessing
import os
import stat
import threading

import pytest
from helpers import MODEL, json_copy, reply, tool_use

from lattice import (
    Agent,
    HistoryStoreError,
    JsonlHistoryStore,
    Tool,
    create_jsonl_history_store,
)
from lattice.stores import jsonl as jsonl_module
from lattice.testing import ScriptedModelClient, assert_well_formed


def msg(i, text="hello"):
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{text} {i}"}


def leftovers(folder, name):
    return sorted(p for p in os.listdir(folder) if p not in (name, name + ".lock"))


def test_round_trip_and_line_format(tmp_path):
    path = tmp_path / "h.jsonl"
    store = create_jsonl_history_store(path)
    assert isinstance(store, JsonlHistoryStore)
    first = {"role": "user", "content": "héllo — 你好"}
    second = {"role": "assistant", "content": [{"type": "text", "text": "line\nbreak"}]}
    store.append(first)
    store.append(second)
    assert store.load() == [first, second]
    raw = path.read_bytes()
    assert raw == (
        '{"role":"user","content":"héllo — 你好"}\n'
        '{"role":"assistant","content":[{"type":"text","text":"line\\nbreak"}]}\n'
    ).encode()
    # A second store on the same file (another Agent, another process) sees the same.
    assert JsonlHistoryStore(str(path)).load() == [first, second]


def test_stored_data_is_a_copy(tmp_path):
    store = JsonlHistoryStore(tmp_path / "h.jsonl")
    message = {"role": "user", "content": [{"type": "text", "text": "a"}]}
    store.append(message)
    message["content"][0]["text"] = "changed"
    assert store.load()[0]["content"][0]["text"] == "a"


def test_no_io_until_the_first_write(tmp_path):
    path = tmp_path / "a" / "b" / "h.jsonl"
    store = JsonlHistoryStore(path)
    assert not (tmp_path / "a").exists()
    assert store.load() == []
    store.close()
    assert not (tmp_path / "a").exists()
    store.append(msg(0))
    assert sorted(os.listdir(path.parent)) == ["h.jsonl", "h.jsonl.lock"]
    assert store.load() == [msg(0)]


def test_replace_creates_missing_folders(tmp_path):
    path = tmp_path / "new" / "h.jsonl"
    JsonlHistoryStore(path).replace([msg(0)])
    assert JsonlHistoryStore(path).load() == [msg(0)]


def test_files_are_private(tmp_path):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    store.append(msg(0))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(path) + ".lock").st_mode) == 0o600
    store.replace([msg(1)])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_home_is_expanded_and_pathlike_accepted(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    store = JsonlHistoryStore("~/sessions/h.jsonl")
    assert store.path == str(tmp_path / "sessions" / "h.jsonl")
    store.append(msg(0))
    assert JsonlHistoryStore(tmp_path / "sessions" / "h.jsonl").load() == [msg(0)]
    with pytest.raises(TypeError):
        JsonlHistoryStore(b"/tmp/bytes.jsonl")


def test_path_is_fixed_at_construction(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = JsonlHistoryStore("h.jsonl")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    store.append(msg(0))
    assert (tmp_path / "h.jsonl").exists()


def test_corrupt_lines_are_skipped_and_counted(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    good = [msg(i) for i in range(3)]
    lines = [
        json.dumps(good[0]),
        "{not json",
        json.dumps(good[1]),
        "[1, 2]",  # JSON, but not a message
        "",  # blank lines are not corruption
        b"\xff\xfe garbage".decode("latin-1"),
        json.dumps(good[2]),
        '{"role": "user", "content": "cut sh',  # a final line torn by a crash
    ]
    path.write_bytes("\n".join(lines).encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert JsonlHistoryStore(path).load() == good
    warnings = [r.getMessage() for r in caplog.records if r.name == "lattice"]
    assert len(warnings) == 1 and "skipped 4 corrupt line(s)" in warnings[0]


def test_append_after_a_torn_line_does_not_glue_onto_it(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    path.write_bytes(json.dumps(msg(0)).encode() + b"\n" + b'{"role":"assistant","cont')
    store = JsonlHistoryStore(path)
    store.append(msg(2))
    store.append(msg(3))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert store.load() == [msg(0), msg(2), msg(3)]
    assert "skipped 1 corrupt line(s)" in caplog.text
    assert path.read_bytes().endswith(b"\n")


def test_a_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(msg(0)))  # e.g. written by hand
    store = JsonlHistoryStore(path)
    assert store.load() == [msg(0)]
    store.append(msg(1))
    assert store.load() == [msg(0), msg(1)]
    assert path.read_text().count("\n") == 2


def test_replace_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    for i in range(5):
        store.append(msg(i))
    store.replace([msg(10), msg(11)])
    assert store.load() == [msg(10), msg(11)]
    store.append(msg(12))  # the cached descriptor named the replaced file
    assert store.load() == [msg(10), msg(11), msg(12)]
    store.replace([])
    assert store.load() == []
    assert leftovers(tmp_path, "h.jsonl") == []


def test_failed_serialisation_leaves_the_file_untouched(tmp_path):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    store.append(msg(0))
    before = path.read_bytes()
    with pytest.raises(TypeError):
        store.replace([msg(1), msg(2), {"role": "user", "content": object()}])
    with pytest.raises(TypeError):
        store.append({"role": "user", "content": {1, 2}})
    assert path.read_bytes() == before
    assert leftovers(tmp_path, "h.jsonl") == []


def test_a_replace_failing_mid_write_removes_its_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    store.append(msg(0))

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonl_module.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        store.replace([msg(1)] * 100)
    monkeypatch.undo()
    assert store.load() == [msg(0)]
    assert leftovers(tmp_path, "h.jsonl") == []
    store.append(msg(1))
    assert store.load() == [msg(0), msg(1)]


def test_a_short_write_is_an_error(tmp_path, monkeypatch):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    store.append(msg(0))
    real_write = os.write
    monkeypatch.setattr(jsonl_module.os, "write", lambda fd, data: real_write(fd, data[:7]))
    with pytest.raises(OSError, match="short write"):
        store.append(msg(1))
    monkeypatch.undo()
    store.append(msg(2))
    assert store.load() == [msg(0), msg(2)]


def test_another_store_replacing_is_noticed(tmp_path):
    path = tmp_path / "h.jsonl"
    a, b = JsonlHistoryStore(path), JsonlHistoryStore(path)
    a.append(msg(0))  # a now holds a descriptor on the first file
    b.replace([msg(5)])
    a.append(msg(6))
    assert b.load() == [msg(5), msg(6)]


def test_file_removed_behind_the_stores_back_is_recreated(tmp_path):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    store.append(msg(0))
    os.unlink(path)
    store.append(msg(1))
    assert store.load() == [msg(1)]


def test_close_and_reuse_and_fsync(tmp_path):
    path = tmp_path / "h.jsonl"
    with JsonlHistoryStore(path, fsync=True) as store:
        store.append(msg(0))
    store.append(msg(1))  # reopened after close
    store.close()
    store.close()
    assert store.load() == [msg(0), msg(1)]
    assert "h.jsonl" in repr(store)


def test_threads_appending_through_one_and_several_stores(tmp_path):
    path = tmp_path / "h.jsonl"
    shared = JsonlHistoryStore(path)
    per_thread = 150

    def work(n, store):
        for i in range(per_thread):
            store.append({"role": "user", "content": f"{n}:{i}", "pad": "x" * (n * 500)})

    threads = [threading.Thread(target=work, args=(n, shared)) for n in range(4)]
    threads += [threading.Thread(target=work, args=(n, JsonlHistoryStore(path)))
                for n in range(4, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded = shared.load()
    assert len(loaded) == 8 * per_thread
    for n in range(8):
        mine = [m["content"] for m in loaded if m["content"].startswith(f"{n}:")]
        assert mine == [f"{n}:{i}" for i in range(per_thread)]


def _forked_child(store, count):
    for i in range(count):
        store.append({"role": "user", "content": f"child {i}"})


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # other tests' threads
def test_a_store_inherited_through_fork(tmp_path):
    path = tmp_path / "h.jsonl"
    store = JsonlHistoryStore(path)
    store.append({"role": "user", "content": "before fork"})  # descriptors now cached
    child = multiprocessing.get_context("fork").Process(target=_forked_child, args=(store, 300))
    child.start()
    for i in range(300):
        store.append({"role": "user", "content": f"parent {i}", "pad": "p" * 3000})
    child.join(30)
    assert child.exitcode == 0
    contents = [m["content"] for m in store.load()]
    assert len(contents) == 601
    assert [c for c in contents if c.startswith("child")] == [f"child {i}" for i in range(300)]


# -- SPEC 8 conformance ----------------------------------------------------------------------


SEED = [{"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello Ada"}]}]


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
    assert_well_formed(json_copy(agent.get_history()))
