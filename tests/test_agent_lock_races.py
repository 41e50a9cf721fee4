"""SPEC 14 at the edges of a query: what another writer does between a read and the version
the Agent remembers, a store write still in flight when a query ends, and a query generator
that is closed or dropped.

Each store here is a real one with one step made slow or racy by a subclass, so the race is
forced to happen, not waited for.
"""

from __future__ import annotations

import gc
import threading

import pytest

from lattice import AbortController, Agent, ConcurrentQueryError
from lattice.stores import JsonlHistoryStore, SqliteHistoryStore
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed

KINDS = ["jsonl", "sqlite"]


def store_class(kind):
    return JsonlHistoryStore if kind == "jsonl" else SqliteHistoryStore


def make(kind, tmp_path, cls=None, **options):
    cls = cls or store_class(kind)
    if kind == "jsonl":
        return cls(tmp_path / "c.jsonl", **options)
    return cls(tmp_path / "c.db", "s1", **options)


def user(text):
    return {"role": "user", "content": text}


def answer(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def contents(messages):
    return [m["content"] if isinstance(m["content"], str) else m["content"][0].get("text")
            for m in messages]


def echo_client():
    return FunctionModelClient(lambda request: f"saw {contents(request.messages)}")


@pytest.mark.parametrize("kind", KINDS)
def test_an_agent_that_read_an_empty_session_reloads_once_another_wrote_it(tmp_path, kind):
    a = Agent(model="m", model_client=echo_client(), history_store=make(kind, tmp_path))
    assert a.get_history() == []  # the session is empty: its version is None
    b = Agent(model="m", model_client=ScriptedModelClient(["B answered"]),
              history_store=make(kind, tmp_path))
    b.prompt("B asks")
    assert a.prompt("A asks").result == "saw ['B asks', 'B answered', 'A asks']"


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_between_a_load_and_the_version_read_is_not_missed(tmp_path, kind):
    """``get_history()`` outside a query loads without the session lock: another process may
    append right after the read. The Agent must not take that append as its own view."""
    others = []

    class Racy(store_class(kind)):
        def load(self):
            loaded = super().load()
            while others:  # another process writes just after our read
                make(kind, tmp_path).append(others.pop(0))
            return loaded

    first = make(kind, tmp_path)
    first.append(user("first"))  # a non-empty session: its version is not None
    first.append(answer("first answer"))
    a = Agent(model="m", model_client=echo_client(), history_store=make(kind, tmp_path, Racy))
    others[:] = [user("B asks"), answer("B answered")]
    assert contents(a.get_history()) == ["first", "first answer"]
    result = a.prompt("A asks")
    assert result.result == "saw ['first', 'first answer', 'B asks', 'B answered', 'A asks']"
    assert contents(make(kind, tmp_path).load())[2:] == [
        "B asks", "B answered", "A asks", result.result]


@pytest.mark.parametrize("kind", KINDS)
def test_the_session_stays_held_until_a_write_in_flight_at_the_end_lands(tmp_path, kind):
    """A query that ends (here: aborted) while its worker is still writing a reply to the
    store: the write lands after the end. Until it has, the session is not free, or another
    process's query would get that reply in the middle of its own turn."""
    entered, go = threading.Event(), threading.Event()

    class SlowAppend(store_class(kind)):
        def append(self, message):
            if message["role"] == "assistant":
                entered.set()
                assert go.wait(20)
            super().append(message)

    a = Agent(model="m", model_client=ScriptedModelClient(["slow reply"]),
              history_store=make(kind, tmp_path, SlowAppend))
    controller = AbortController()
    results = []
    worker = threading.Thread(target=lambda: results.append(
        a.prompt("one", signal=controller.signal)))
    worker.start()
    assert entered.wait(20)
    controller.abort()
    worker.join(20)
    assert results[0].subtype == "error_abort"  # the query ended; its write has not landed
    b = Agent(model="m", model_client=ScriptedModelClient(["too soon"]),
              history_store=make(kind, tmp_path))
    with pytest.raises(ConcurrentQueryError):
        b.prompt("two")
    go.set()  # the write lands, then the session is given back
    waiter = Agent(model="m", model_client=ScriptedModelClient(["two done"]),
                   history_store=make(kind, tmp_path), session_lock_wait_s=20)
    assert waiter.prompt("two").result == "two done"
    stored = make(kind, tmp_path).load()
    assert contents(stored) == ["one", "slow reply", "two", "two done"]
    assert_well_formed(stored)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["close", "drop"])
def test_a_closed_or_dropped_query_frees_the_session(tmp_path, kind, how):
    a = Agent(model="m", model_client=ScriptedModelClient(["first"]),
              history_store=make(kind, tmp_path))
    query = a.query("one")
    next(query)  # the lock is taken and the query runs
    other = Agent(model="m", model_client=ScriptedModelClient(["second"]),
                  history_store=make(kind, tmp_path))
    with pytest.raises(ConcurrentQueryError):
        other.prompt("blocked")
    if how == "close":
        query.close()
    else:
        del query
        gc.collect()
    assert other.prompt("two").result == "second"
    assert_well_formed(make(kind, tmp_path).load())
