"""SPEC 14 at the edges of a query: what another writer does between a read and the version
the Agent remembers, a store write still in flight when a query ends, and a query generator
that is closed or dropped.

Each store here is a real one with one step made slow or racy by a subclass, so the race is
forced to happen, not waited for.
"""

from __future__ import annotations

import gc
import threading
import time

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


class SlowIo:
    """``History.io`` whose first acquisition by the query's worker thread waits for
    ``go``: the worker has decided to write (the query was still running) but is not yet
    in the store when the query ends, as if the OS paused it right there."""

    def __init__(self, entered, go):
        self.lock = threading.Lock()
        self.entered, self.go = entered, go

    def acquire(self, blocking=True, timeout=-1):
        if threading.current_thread().name == "lattice-query" and not self.entered.is_set():
            self.entered.set()
            assert self.go.wait(20)
        return self.lock.acquire(blocking, timeout)

    def release(self):
        self.lock.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc_info):
        self.release()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("where", ["in the store", "on its way to the store"])
def test_the_session_stays_held_until_a_write_in_flight_at_the_end_lands(tmp_path, kind,
                                                                        where):
    """A query that ends (here: aborted) while its worker is writing a reply to the store:
    the write lands after the end. Until it has, the session is not free, or another
    process's query would get that reply in the middle of its own turn."""
    entered, go = threading.Event(), threading.Event()

    class SlowAppend(store_class(kind)):
        def append(self, message):
            if message["role"] == "assistant" and where == "in the store":
                entered.set()
                assert go.wait(20)
            super().append(message)

    a = Agent(model="m", model_client=ScriptedModelClient(["slow reply"]),
              history_store=make(kind, tmp_path, SlowAppend))
    if where != "in the store":
        a._conversation.link.io = SlowIo(entered, go)
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
def test_a_late_write_is_accounted_for_before_the_session_is_given_back(tmp_path, kind):
    """The write in flight at the end lands, then the session is given back, and the same
    Agent's next query, which waited for that write, takes it at once: that query must know
    the store holds a message its memory does not (the history is diverged), before it
    writes anything."""
    entered, go = threading.Event(), threading.Event()

    class Store(store_class(kind)):
        def append(self, message):
            if contents([message]) == ["slow reply"]:
                entered.set()
                assert go.wait(20)
            super().append(message)

    store = make(kind, tmp_path, Store)
    seen = []

    def model(request):
        seen.append((contents(request.messages), contents(make(kind, tmp_path).load())))
        return "slow reply" if len(seen) == 1 else "next reply"

    a = Agent(model="m", model_client=FunctionModelClient(model), history_store=store,
              session_lock_wait_s=20)
    controller = AbortController()
    threading.Thread(target=lambda: entered.wait(20) and controller.abort()).start()
    assert a.prompt("one", signal=controller.signal).subtype == "error_abort"

    def land_once_the_next_query_started():
        deadline = time.monotonic() + 20
        while a._conversation.race is None and time.monotonic() < deadline:
            time.sleep(0.005)
        go.set()

    threading.Thread(target=land_once_the_next_query_started).start()
    assert a.prompt("next").result == "next reply"
    sent, stored = seen[1]
    assert sent == stored == ["one", "next"]  # the late "slow reply" was taken back out
    assert contents(make(kind, tmp_path).load()) == ["one", "next", "next reply"]


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


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_agents_next_query_waits_for_its_own_write_in_flight(tmp_path, kind):
    """SPEC 16a: after an abort returned early with a slow store, the same Agent's next
    query waits for its own last write to land, then goes on; it is not another query
    (ConcurrentQueryError is for another holder only)."""
    entered, go = threading.Event(), threading.Event()

    class Slow(store_class(kind)):
        def append(self, message):
            if contents([message]) == ["slow reply"]:
                entered.set()
                assert go.wait(20)
            super().append(message)

    replies = iter(["slow reply", "next reply"])
    a = Agent(model="m", model_client=FunctionModelClient(lambda request: next(replies)),
              history_store=make(kind, tmp_path, Slow))
    controller = AbortController()
    threading.Thread(target=lambda: entered.wait(20) and controller.abort()).start()
    assert a.prompt("one", signal=controller.signal).subtype == "error_abort"
    assert not go.is_set()  # the reply's write is still in flight
    out = []
    second = threading.Thread(target=lambda: out.append(_outcome(a.prompt, "two")))
    second.start()
    second.join(0.3)
    assert second.is_alive() and out == []  # waiting for its own write, not refused
    go.set()
    second.join(20)
    assert out and out[0].result == "next reply", out
    stored = make(kind, tmp_path).load()
    assert contents(stored) == ["one", "two", "next reply"]  # the late reply resynced out
    assert_well_formed(stored)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the outcome is what is checked
        return exc


def test_the_wait_for_its_own_write_is_bounded_by_the_querys_signal(tmp_path):
    """A store write that never lands must not hang the next query beyond its signal:
    it ends ``error_abort`` promptly, writing nothing (it never held the session)."""
    entered, go = threading.Event(), threading.Event()

    class Stuck(JsonlHistoryStore):
        def append(self, message):
            if contents([message]) == ["slow reply"]:
                entered.set()
                assert go.wait(20)
            super().append(message)

    a = Agent(model="m", model_client=ScriptedModelClient(["slow reply", "never"]),
              history_store=Stuck(tmp_path / "c.jsonl"))
    first = AbortController()
    threading.Thread(target=lambda: entered.wait(20) and first.abort()).start()
    assert a.prompt("one", signal=first.signal).subtype == "error_abort"
    try:
        second = AbortController()
        threading.Timer(0.2, second.abort).start()
        started = time.monotonic()
        result = a.prompt("two", signal=second.signal)
        assert result.subtype == "error_abort" and result.num_turns == 0
        assert time.monotonic() - started < 5
        assert contents(a.get_history()) == ["one"]  # "two" never entered the history
    finally:
        go.set()
    # The write lands; the next query goes on from there.
    assert a.prompt("three").result == "never"
