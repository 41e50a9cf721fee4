"""A store left one message ahead of memory is rewritten from memory by the next write,
and the repair written after a query ended is then stored once, not twice.

Found by three concurrent full test runs: test_jsonl_file_tracks_history_through_every_ending
failed about once in three loaded runs on Python 3.9 with the interrupt repair stored twice.
The worker's write of a call's result reached the store after the query was interrupted
(so memory never kept it and the history was marked diverged); the caller's repair was kept
in memory and then saved with ``save_later``, which rewrote the store from memory (repair
included) and then appended the repair again. The Agent-level test below forces that
interleaving with an abort (which ends a query during a store write).
"""
import json
import threading

from helpers import MODEL, join_lattice_threads, lattice_threads, reply, tool_use

from lattice import AbortController, Agent, JsonlHistoryStore, Tool
from lattice.conversation.history import History
from lattice.conversation.store_link import StoreLink
from lattice.testing import ScriptedModelClient, assert_well_formed


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_save_later_after_a_divergence_stores_the_kept_message_once(tmp_path):
    path = tmp_path / "h.jsonl"
    link = StoreLink(JsonlHistoryStore(path), History())
    link.append({"role": "user", "content": "a"})
    JsonlHistoryStore(path).append({"role": "assistant", "content": "lost the race"})
    link.mark_diverged()  # as the loop marks it when a stored write lost the race
    repair = {"role": "assistant", "content": "repair"}
    link.history.keep(repair)  # _repair_tail: memory first, the store when it is free
    link.save_later("append", repair)
    assert read_lines(path) == link.history.messages == [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "repair"}]
    assert not link.diverged


def test_a_plain_append_after_a_divergence_is_still_written(tmp_path):
    path = tmp_path / "h.jsonl"
    link = StoreLink(JsonlHistoryStore(path), History())
    link.append({"role": "user", "content": "a"})
    JsonlHistoryStore(path).append({"role": "assistant", "content": "lost the race"})
    link.mark_diverged()
    link.append({"role": "assistant", "content": "b"})  # saved first, kept after
    assert read_lines(path) == link.history.messages == [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]


class GatedStore(JsonlHistoryStore):
    """Holds the append of the tool's result until the test lets it go."""

    def __init__(self, path):
        super().__init__(path)
        self.entered, self.go = threading.Event(), threading.Event()

    def append(self, message):
        content = message.get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            if not self.entered.is_set():
                self.entered.set()
                assert self.go.wait(30), "the test never let the write go"
        super().append(message)


def test_abort_while_a_result_is_being_stored_leaves_file_and_memory_equal(tmp_path,
                                                                           monkeypatch):
    path = tmp_path / "h.jsonl"
    store = GatedStore(path)
    t = Tool("t", "T.", {"type": "object"}, lambda i: "ran")
    agent = Agent(model=MODEL, tools=[t], history_store=store,
                  model_client=ScriptedModelClient([reply(tool_use("t", {}, "1")), "next"]))
    # The interleaving the loaded runs hit: the worker's stored write loses the race to
    # the end of the query before the caller's repair is saved.
    save_later = StoreLink.save_later
    before = set(lattice_threads())  # workers other tests left running are not waited for

    def after_the_worker(self, method, *args):
        store.go.set()
        join_lattice_threads(before, 30)  # this query's worker
        return save_later(self, method, *args)

    monkeypatch.setattr(StoreLink, "save_later", after_the_worker)
    controller, results = AbortController(), []
    runner = threading.Thread(
        target=lambda: results.append(agent.prompt("go", signal=controller.signal)))
    runner.start()
    assert store.entered.wait(30)
    controller.abort()  # bounds the query, store I/O included: it ends during the write
    runner.join(30)
    assert results and results[0].subtype == "error_abort", results
    assert read_lines(path) == agent.get_history()
    assert_well_formed(agent.get_history())
    monkeypatch.undo()
    agent.prompt("again")
    assert read_lines(path) == agent.get_history()
    assert_well_formed(agent.get_history())
