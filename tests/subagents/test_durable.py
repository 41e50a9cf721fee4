"""SPEC 22, durable children: in a parent run with a ``run_id`` each child call is a run of
its own, ``f"{parent_run_id}/{tool_use_id}"``, in the child's store or the parent's under a
derived session; resuming the parent resumes the child where it stopped."""

import pytest
from helpers import reply, tool_use

from lattice import Agent, MemoryHistoryStore, SqliteHistoryStore, follow
from lattice.testing import FunctionModelClient, assert_well_formed, history_problems


class Crash(BaseException):
    """Stands for the process dying: nothing catches it (``forget_the_repairs`` then takes
    back what only a process that lives on writes; tests/subagents/test_kills.py kills
    real processes)."""


def forget_the_repairs(store, sessions):
    """Drop the answers a failed query wrote for its open calls ("the query failed"): a
    killed process never writes them."""
    for session in sessions:
        mine = store.with_session(session)
        messages = mine.load()
        if messages and "the query failed" in str(messages[-1]["content"]):
            mine.replace(messages[:-1])


def delegate(id="d1", prompt="research it"):
    return tool_use("researcher", {"prompt": prompt}, id=id)


class World:
    """A parent delegating once to a child that makes two tool turns (``charge``, not
    idempotent), then answers; every model request and side effect is counted."""

    def __init__(self, crash_at=None):
        self.requests = {"parent": 0, "child": 0}
        self.charged = []
        self.crash_at = crash_at  # ("charge", n) or ("child_request", n)

    def child_model(self, request):
        self.requests["child"] += 1
        step = sum(1 for m in request.messages if m["role"] == "assistant")
        if self.crash_at == ("child_request", step):
            self.crash_at = None
            raise Crash()
        if step < 2:
            return reply(tool_use("charge", {"n": step}, id=f"ch{step}"),
                         usage={"input_tokens": 10, "output_tokens": 1}, model="small")
        return reply("findings", usage={"input_tokens": 10, "output_tokens": 1}, model="small")

    def parent_model(self, request):
        self.requests["parent"] += 1
        if isinstance(request.messages[-1]["content"], str):
            return reply(delegate(), usage={"input_tokens": 1, "output_tokens": 1})
        return reply("report: " + request.messages[-1]["content"][0]["content"],
                     usage={"input_tokens": 1, "output_tokens": 1})

    def child(self, store=None):
        def charge(n: int) -> str:
            """Charge (not safe to repeat)."""
            if self.crash_at == ("charge", n):
                self.crash_at = None
                self.charged.append(n)
                raise Crash()
            self.charged.append(n)
            return f"charged {n}"

        return Agent(model="small", name="researcher", system="Researches.",
                     model_client=FunctionModelClient(self.child_model), tools=[charge],
                     history_store=store)

    def parent(self, store, child_store=None):
        return Agent(model="big", model_client=FunctionModelClient(self.parent_model),
                     tools=[self.child(child_store).as_tool()], history_store=store)


def test_a_child_call_is_a_run_with_a_derived_id_in_a_derived_session(tmp_path):
    world = World()
    store = SqliteHistoryStore(tmp_path / "h.db", "s1")
    result = world.parent(store).prompt("go", run_id="job")
    assert result.result == "report: findings"
    runs = {r["run_id"]: r for r in store.list_runs(all_sessions=True)}
    assert set(runs) == {"job", "job/d1"}
    assert runs["job"]["session_id"] == "s1"
    assert runs["job/d1"]["session_id"] == "s1/d1" and runs["job/d1"]["state"] == "ended"
    assert store.list_runs() == [runs["job"]] or [r["run_id"] for r in store.list_runs()] == [
        "job"]
    child_history = store.with_session("s1/d1").load()
    assert child_history[0] == {"role": "user", "content": "research it"}
    assert_well_formed(child_history, strict=True)


def test_a_child_with_its_own_store_keeps_its_run_there(tmp_path):
    world = World()
    store = SqliteHistoryStore(tmp_path / "p.db", "s1")
    child_store = SqliteHistoryStore(tmp_path / "c.db", "kid")
    world.parent(store, child_store).prompt("go", run_id="job")
    [run] = child_store.list_runs(all_sessions=True)
    assert run["run_id"] == "job/d1" and run["state"] == "ended"
    assert [r["run_id"] for r in store.list_runs(all_sessions=True)] == ["job"]


def test_the_parents_run_and_a_replay_count_the_childs_usage():
    world = World()
    store = MemoryHistoryStore()
    first = world.parent(store).prompt("go", run_id="job")
    assert first.usage.input_tokens == 2 + 30 and first.num_turns == 2
    assert first.usage.by_model["small"].input_tokens == 30
    again = world.parent(store).prompt("go", run_id="job")
    assert again.replayed and again.usage == first.usage
    assert again.usage.by_model == first.usage.by_model
    assert world.requests == {"parent": 2, "child": 3}


@pytest.mark.parametrize("crash", [("charge", 1), ("child_request", 2)])
def test_resuming_the_parent_resumes_the_child_without_spending_its_finished_turns(
        crash, tmp_path):
    world = World(crash_at=crash)
    store = SqliteHistoryStore(tmp_path / "h.db", "s1")
    with pytest.raises(Crash):
        world.parent(store).prompt("go", run_id="job")
    forget_the_repairs(store, ["s1", "s1/d1"])
    assert world.requests["child"] == (3 if crash[0] == "child_request" else 2)
    before = dict(world.requests)
    result = world.parent(store).prompt("go", run_id="job")
    assert result.subtype == "success" and result.result.startswith("report:")
    # the parent's one request to read the child's result; the child's last turn only
    assert world.requests["parent"] - before["parent"] == 1
    assert world.requests["child"] - before["child"] == 1
    assert world.charged.count(0) == 1 and world.charged.count(1) == 1  # at most once each
    for session in ("s1", "s1/d1"):
        assert history_problems(store.with_session(session).load()) == []
    assert result.usage.input_tokens == 2 + 30  # every stored reply counted once


def test_follow_with_include_subagent_messages_yields_the_childs_messages(tmp_path):
    world = World()
    store = SqliteHistoryStore(tmp_path / "h.db", "s1")
    world.parent(store).prompt("go", run_id="job")
    plain = list(follow(store, run_id="job", wait_s=0))
    items = list(follow(store, run_id="job", wait_s=0, include_subagent_messages=True))
    # the child's prompt, its 2 tool turns of 2 messages, its answer: before the results
    assert len(items) == len(plain) + 6
    assert [m.parent_tool_use_id for m in items] == [None, None] + ["d1"] * 6 + [None] * 3
    assert items[2].content == "research it"
    assert items[-1].type == "result" and items[-1].parent_tool_use_id is None


def test_a_jsonl_parent_keeps_its_childs_run_in_a_file_beside_it(tmp_path):
    from lattice import JsonlHistoryStore

    world = World()
    store = JsonlHistoryStore(tmp_path / "chat.jsonl")
    assert world.parent(store).prompt("go", run_id="job").result == "report: findings"
    child = JsonlHistoryStore(tmp_path / "chat.d1.jsonl")
    [run] = child.list_runs()
    assert run["run_id"] == "job/d1" and run["state"] == "ended"
    assert_well_formed(child.load(), strict=True)
    again = world.parent(JsonlHistoryStore(tmp_path / "chat.jsonl")).prompt("go", run_id="job")
    assert again.replayed and world.requests == {"parent": 2, "child": 3}


def test_without_a_run_id_a_child_is_no_run():
    world = World()
    store = MemoryHistoryStore()
    world.parent(store).prompt("go")
    assert [r["run_id"] for r in store.list_runs()] == []


def test_a_crash_while_the_child_carries_out_its_approvals_is_resumed_by_approving_again(
        tmp_path):
    """The parent resumes approvals; the child's approved call starts, and the process
    dies. Approving again resumes the child's approvals run: the call is not run twice."""
    from lattice import Tool

    paid, crash = [], [True]

    def pay(input):
        paid.append(input["amount"])
        if crash and crash.pop():
            raise Crash()
        return "paid"

    def child_model(request):
        last = request.messages[-1]["content"]
        if isinstance(last, str):
            return reply(tool_use("pay", {"amount": 5}, id="c1"))
        return "child saw: " + last[0]["content"]

    def parent_model(request):
        last = request.messages[-1]["content"]
        if isinstance(last, str):
            return reply(delegate())
        return "parent saw: " + last[0]["content"]

    def parent(store):
        child = Agent(model="c", name="researcher", system="Pays.",
                      model_client=FunctionModelClient(child_model),
                      tools=[Tool("pay", "Pay.", {"type": "object"}, pay,
                                  requires_approval=True)])
        return Agent(model="p", model_client=FunctionModelClient(parent_model),
                     tools=[child.as_tool()], history_store=store)

    store = SqliteHistoryStore(tmp_path / "h.db", "s1")
    assert parent(store).prompt("go", run_id="job").subtype == "awaiting_approval"
    with pytest.raises(Crash):
        parent(store).prompt(approvals={"c1": True})
    forget_the_repairs(store, ["s1", "s1/d1"])
    [again] = parent(store).pending_approvals()  # the child's call, as the page shows it
    assert again.path == ["d1", "c1"]
    result = parent(store).prompt(approvals={"c1": True})
    assert result.subtype == "success" and "unknown" in result.result
    assert paid == [5]  # not run twice
    for session in ("s1", "s1/d1"):
        assert history_problems(store.with_session(session).load()) == []


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_follow_finds_a_child_with_its_own_store_in_the_same_database(kind, tmp_path, request):
    world = World()
    if kind == "sqlite":
        store = SqliteHistoryStore(tmp_path / "h.db", "s1")
        child_store = SqliteHistoryStore(tmp_path / "h.db", "kid")  # its own session
    else:
        pytest.importorskip("psycopg")
        from lattice import PostgresHistoryStore

        conninfo = request.getfixturevalue("postgres_server").conninfo
        session = f"s-{tmp_path.name}"
        store = PostgresHistoryStore(conninfo, session)
        child_store = PostgresHistoryStore(conninfo, f"kid-{tmp_path.name}")
    world.parent(store, child_store).prompt("go", run_id="job")
    items = list(follow(store, run_id="job", wait_s=0, include_subagent_messages=True))
    assert [m.parent_tool_use_id for m in items] == [None, None] + ["d1"] * 6 + [None] * 3
    assert items[2].content == "research it"


def test_a_shared_child_without_a_store_is_not_run_again_after_a_crash(tmp_path):
    """A shared child without a store keeps its conversation in its Agent: after a crash
    the child of a new process knows nothing of the call, so running it again would repeat
    its non-idempotent tools. Its call is answered "uncertain" instead (SPEC 17)."""
    world = World(crash_at=("child_request", 2))
    store = SqliteHistoryStore(tmp_path / "h.db", "s1")

    def parent():  # a new process: a new child Agent, its conversation empty
        return Agent(model="big", model_client=FunctionModelClient(world.parent_model),
                     tools=[world.child().as_tool(isolated=False)], history_store=store)

    assert not world.child().as_tool(isolated=False).idempotent
    assert world.child(MemoryHistoryStore()).as_tool(isolated=False).idempotent
    with pytest.raises(Crash):
        parent().prompt("go", run_id="job")
    forget_the_repairs(store, ["s1"])
    assert world.charged == [0, 1]
    result = parent().prompt("go", run_id="job")
    assert result.subtype == "success"
    assert world.charged == [0, 1]  # the child's non-idempotent tool ran once per call
    assert "whether it took effect is unknown" in result.result
    assert history_problems(store.load()) == []
