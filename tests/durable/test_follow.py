"""lattice.follow(): a session's messages as they are stored, from another thread or process,
ending with the run's result (SPEC 19, 21a)."""

import threading
import time

import pytest
from helpers import function_agent, reply, tool_use
from store_kinds import PROCESS_KINDS, child, make_store

import lattice
from lattice import AbortController, MemoryHistoryStore, define_history_store, follow


def slow_tool_model(turns=3, delay=0.0, gate=None):
    """A model making ``turns`` tool turns (tool ``step``), then answering."""

    def model(request):
        if gate is not None:
            gate.wait(10)
        if delay:
            time.sleep(delay)  # slow model work, so the follower sees the run grow
        done = sum(1 for m in request.messages if m["role"] == "user" and isinstance(m["content"], list))
        if done >= turns:
            return reply(f"done after {done}")
        return reply(tool_use("step", {"n": done}, id=f"t{done}"))

    return model


def step(n: int) -> str:
    """One step."""
    return f"step {n}"


def agent_on(store, model):
    return function_agent(model, tools=[lattice.tool(step)], history_store=store)[0]


def kinds(items):
    return [i.type for i in items]


# -- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{"after": -1}, {"after": 1.5}, {"after": True},
                                     {"poll_s": 0}, {"poll_s": -1}, {"poll_s": "1"},
                                     {"wait_s": -1}, {"run_id": ""}, {"run_id": "a\nb"},
                                     {"run_id": "x" * 201}])
def test_bad_options_are_refused_naming_them(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        follow(MemoryHistoryStore(), **options)


def test_a_run_id_needs_a_store_that_records_runs():
    store = define_history_store(load=lambda: [], append=lambda m: None)
    with pytest.raises(ValueError, match="records runs"):
        follow(store, run_id="r1")


# -- in one process --------------------------------------------------------------------------

def test_a_finished_run_is_yielded_whole_then_its_result():
    store = MemoryHistoryStore()
    result = agent_on(store, slow_tool_model(2)).prompt("go", run_id="r1")
    items = list(follow(store, run_id="r1", poll_s=0.01))
    assert kinds(items) == ["user", "assistant", "user", "assistant", "user", "assistant",
                            "result"]
    assert items[0].message["content"] == "go"
    assert [i.message for i in items[:-1]] == store.load()
    final = items[-1]
    assert final.replayed and final.subtype == "success" and final.result == result.result
    assert final.num_turns == result.num_turns == 3


def test_following_while_the_run_goes_yields_every_message_in_order_and_the_result():
    store = MemoryHistoryStore()
    agent = agent_on(store, slow_tool_model(4, delay=0.02))
    runner = threading.Thread(target=agent.prompt, args=("go",), kwargs={"run_id": "r1"})
    runner.start()
    items = list(follow(store, run_id="r1", poll_s=0.005, wait_s=20))
    runner.join(10)
    assert items[-1].type == "result" and items[-1].subtype == "success"
    assert [i.message for i in items[:-1]] == store.load()  # complete, in order, no repeats


def test_a_run_not_recorded_yet_is_waited_for():
    store = MemoryHistoryStore()
    gate = threading.Event()
    agent = agent_on(store, slow_tool_model(1))
    got = []

    def follower():
        got.extend(follow(store, run_id="later", poll_s=0.005, wait_s=20))

    reader = threading.Thread(target=follower)
    reader.start()
    gate.wait(0.2)  # the follower polls a store without the run for a while
    agent.prompt("go", run_id="later")
    reader.join(20)
    assert kinds(got) == ["user", "assistant", "user", "assistant", "result"]


def test_a_mistyped_run_id_yields_nothing_of_the_other_runs():
    """SPEC 21b: a run id the store does not know is waited for (bounded by wait_s or the
    signal); the session's other messages are never yielded for it."""
    store = MemoryHistoryStore()
    agent = agent_on(store, slow_tool_model(1))
    agent.prompt("first", run_id="run-1")
    started = time.monotonic()
    assert list(follow(store, run_id="run-l", poll_s=0.01, wait_s=0.3)) == []
    assert 0.3 <= time.monotonic() - started < 5
    controller = AbortController()
    threading.Timer(0.2, controller.abort).start()
    assert list(follow(store, run_id="run-l", poll_s=0.01, signal=controller.signal)) == []
    assert len(store.load()) == 4  # (there was something to yield wrongly)


def test_after_skips_what_the_page_already_has():
    store = MemoryHistoryStore()
    agent_on(store, slow_tool_model(2)).prompt("go", run_id="r1")
    items = list(follow(store, run_id="r1", after=3, poll_s=0.01))
    assert [i.message for i in items[:-1]] == store.load()[3:]
    assert items[-1].type == "result"


def test_with_a_run_id_what_a_later_query_stored_is_not_yielded():
    store = MemoryHistoryStore()
    agent = agent_on(store, slow_tool_model(1))
    agent.prompt("first", run_id="r1")
    run_length = len(store.load())
    agent.prompt("second", run_id="r2")
    items = list(follow(store, run_id="r1", poll_s=0.01))
    assert len(items) == run_length + 1 and items[-1].type == "result"


def test_without_a_run_id_it_ends_after_wait_s_without_news():
    store = MemoryHistoryStore([{"role": "user", "content": "hi"}])
    started = time.monotonic()
    items = list(follow(store, poll_s=0.01, wait_s=0.2))
    elapsed = time.monotonic() - started
    assert kinds(items) == ["user"]
    assert 0.2 <= elapsed < 5


def test_a_fired_signal_ends_it_quietly():
    store = MemoryHistoryStore()
    controller = AbortController()
    threading.Timer(0.1, controller.abort).start()
    started = time.monotonic()
    assert list(follow(store, run_id="never", poll_s=10, signal=controller.signal)) == []
    assert time.monotonic() - started < 5  # the signal woke the 10 s poll


def test_a_threading_event_is_a_signal_too():
    event = threading.Event()
    event.set()
    assert list(follow(MemoryHistoryStore([{"role": "user", "content": "x"}]),
                       signal=event)) == []


def test_a_rewritten_history_yields_a_compaction_message_and_goes_on():
    store = MemoryHistoryStore()
    agent = agent_on(store, slow_tool_model(1))
    agent.prompt("one")
    follower = follow(store, poll_s=0.005, wait_s=2)
    first = [next(follower) for _ in range(4)]
    assert kinds(first) == ["user", "assistant", "user", "assistant"]
    kept = store.load()[-1]
    agent.replace_history([{"role": "user", "content": "summary of before"}, kept])
    agent.prompt("two")
    rest = list(follower)
    assert rest[0].type == "system" and rest[0].subtype == "compaction"
    assert [i.message["content"] for i in rest[1:2]] == ["two"]
    assert [i.message for i in rest[1:]] == store.load()[2:]


# -- across processes, every store that processes share --------------------------------------

RUNNER = """
import sys, time
from store_kinds import make_store
import lattice
from lattice.testing import FunctionModelClient

kind, where, session = sys.argv[1], sys.argv[2], sys.argv[3]

def model(request):
    time.sleep(0.05)
    done = sum(1 for m in request.messages if m["role"] == "user" and isinstance(m["content"], list))
    if done >= 4:
        return "finished"
    return {"content": [{"type": "tool_use", "id": f"t{done}", "name": "step", "input": {"n": done}}],
            "stop_reason": "tool_use"}

@lattice.tool
def step(n: int) -> str:
    "One step."
    return f"step {n}"

agent = lattice.Agent(model="m", model_client=FunctionModelClient(model), tools=[step],
                      history_store=make_store(kind, where, session))
print(agent.prompt("go", run_id="job-1").subtype, flush=True)
"""


@pytest.mark.parametrize("kind", PROCESS_KINDS)
def test_another_process_follows_the_run(kind, tmp_path, request):
    if kind.startswith("postgres-"):
        pytest.importorskip(kind.split("-", 1)[1])
        where = request.getfixturevalue("postgres_server").conninfo
    else:
        where = str(tmp_path)
    session = f"follow-{kind}"
    store = make_store(kind, where, session)
    runner = child(RUNNER, kind, where, session)
    try:
        items = list(follow(store, run_id="job-1", poll_s=0.01, wait_s=60))
    finally:
        out, _ = runner.communicate(timeout=60)
    assert out.strip() == "success"
    assert items[-1].type == "result" and items[-1].replayed and items[-1].result == "finished"
    assert [i.message for i in items[:-1]] == store.load()
    assert kinds(items[:-1]) == ["user"] + ["assistant", "user"] * 4 + ["assistant"]


@pytest.mark.parametrize("kind", ["sqlite", "postgres-psycopg"])
def test_a_record_the_store_cannot_decode_is_a_history_store_error(kind, tmp_path, request):
    """SPEC 21b: a damaged record is a HistoryStoreError naming the run and the store, from
    follow() as from a query (SQLite's and PostgreSQL's load_run raise ValueError)."""
    if kind.startswith("postgres-"):
        pytest.importorskip("psycopg")
        where = request.getfixturevalue("postgres_server").conninfo
    else:
        where = str(tmp_path)
    session = f"damaged-{kind}-{time.monotonic_ns()}"
    store = make_store(kind, where, session)
    store.append({"role": "user", "content": "hi"})
    store.save_run({"run_id": "r1", "state": "running", "prompt": "hi", "index": 0})
    sql = "UPDATE {} SET record = '{{broken' WHERE run_id = 'r1'"
    if kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(str(tmp_path / "h.db"))
        db.execute(sql.format("lattice_runs"))
        db.commit()
        db.close()
    else:
        from store_kinds import pg_connect

        with pg_connect(where) as conn:
            conn.execute(sql.format("lattice_messages_runs") + " AND session_id = %s",
                         (session,))
    with pytest.raises(lattice.HistoryStoreError, match=r"'r1'.*damaged.*HistoryStore"):
        list(follow(store, run_id="r1", poll_s=0.01, wait_s=1))
