"""SPEC 16a, "a lenient store comes back": with ``fail_on_error=False`` a failed write leaves
the store behind for the rest of that query only. The next query tries again: a store
nobody else wrote meanwhile is rewritten from memory, one somebody did (or one this Agent
never managed to read) wins; one WARNING per query while it keeps failing."""

from __future__ import annotations

import logging
import time

from lattice import Agent, define_history_store
from lattice.stores import JsonlHistoryStore, MemoryHistoryStore
from lattice.testing import FunctionModelClient, assert_well_formed

BLIP_S = 1.5


def texts(messages):
    return [m["content"] if isinstance(m["content"], str) else m["content"][0].get("text")
            for m in messages]


def echo():
    return FunctionModelClient(lambda request: f"re {request.messages[-1]['content']}")


def failures(caplog):
    return [r for r in caplog.records if r.name == "lattice" and "failed" in r.getMessage()]


def back(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "lattice" and "is back" in r.getMessage()]


class Blip(MemoryHistoryStore):
    """A store that is down (every call raises, as a database that went away) until
    ``up_at``; records in which query each failure happened."""

    def __init__(self) -> None:
        super().__init__()
        self.up_at = 0.0
        self.query = 0
        self.failed_in: set = set()

    def _check(self) -> None:
        if time.monotonic() < self.up_at:
            self.failed_in.add(self.query)
            raise ConnectionError("server closed the connection unexpectedly")

    def load(self):
        self._check()
        return super().load()

    def append(self, message):
        self._check()
        super().append(message)

    def replace(self, messages):
        self._check()
        super().replace(messages)

    def version(self):
        self._check()
        return super().version()


def test_a_long_lived_agent_writes_again_after_a_database_blip(caplog):
    store = Blip()
    agent = Agent(model="m", model_client=echo(), history_store=store)
    asked = 0

    def ask():
        nonlocal asked
        asked += 1
        store.query = asked
        assert agent.prompt(f"q{asked}").result == f"re q{asked}"

    with caplog.at_level(logging.WARNING, logger="lattice"):
        ask()
        ask()
        store.up_at = time.monotonic() + BLIP_S  # the database goes away for 1.5 s
        deadline = time.monotonic() + 30
        while time.monotonic() < store.up_at and time.monotonic() < deadline:
            ask()  # memory goes on; the store is tried again by every query
            time.sleep(0.05)
        ask()  # the store is back: rewritten from memory
        ask()
    history = agent.get_history()
    assert len(history) == 2 * asked
    assert store.messages == history  # nothing lost: memory and store agree again
    assert_well_formed(store.messages)
    assert len(failures(caplog)) == len(store.failed_in) >= 2  # one WARNING per query
    assert len(back(caplog)) == 1 and "rewritten from memory" in back(caplog)[0]


def test_the_store_wins_when_somebody_else_wrote_it_meanwhile(tmp_path, caplog):
    path = tmp_path / "c.jsonl"
    down = []

    class Flaky(JsonlHistoryStore):
        def append(self, message):
            if down:
                raise OSError("disk gone")
            super().append(message)

    a = Agent(model="m", model_client=echo(), history_store=Flaky(path))
    b = Agent(model="m", model_client=echo(), history_store=JsonlHistoryStore(path))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        a.prompt("a1")
        down.append(True)
        a.prompt("a2")  # not stored: a's memory holds 2 unsaved messages
        down.clear()
        b.prompt("b1")  # somebody else writes the session meanwhile
        a.prompt("a3")
    assert texts(a.get_history()) == ["a1", "re a1", "b1", "re b1", "a3", "re a3"]
    assert texts(JsonlHistoryStore(path).load()) == texts(a.get_history())
    assert len(back(caplog)) == 1
    assert "written meanwhile" in back(caplog)[0] and "2 unsaved messages dropped" in \
        back(caplog)[0], back(caplog)


def test_a_store_without_version_is_rewritten_from_memory(caplog):
    stored, down = [], []

    def append(message):
        if down:
            raise OSError("disk gone")
        stored.append(message)

    def replace(messages):
        stored[:] = list(messages)

    store = define_history_store(load=lambda: list(stored), append=append, replace=replace)
    agent = Agent(model="m", model_client=echo(), history_store=store)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        agent.prompt("one")
        down.append(True)
        agent.prompt("two")
        down.clear()
        agent.prompt("three")
    assert texts(stored) == ["one", "re one", "two", "re two", "three", "re three"]
    assert "rewritten from memory" in back(caplog)[0]


def test_a_store_this_agent_never_read_wins(caplog):
    state = {"down": True}
    stored = [{"role": "user", "content": "from before"},
              {"role": "assistant", "content": [{"type": "text", "text": "old answer"}]}]

    def load():
        if state["down"]:
            raise OSError("not mounted yet")
        return list(stored)

    store = define_history_store(load=load, append=stored.append)
    agent = Agent(model="m", model_client=echo(), history_store=store)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        agent.prompt("lost")  # the load failed: memory only
        state["down"] = False
        agent.prompt("kept")
    assert texts(agent.get_history()) == ["from before", "old answer", "kept", "re kept"]
    assert texts(stored) == texts(agent.get_history())
    assert "never read" in back(caplog)[0] and "2 unsaved messages dropped" in back(caplog)[0]
