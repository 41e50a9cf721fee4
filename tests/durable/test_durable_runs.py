"""Durable runs in one process (SPEC 17, 21a): run_id on query()/prompt(), the replay of an
ended run, the continuation of one left running (the call journal's three rules), the
supersede rule, reads that never write, and approvals journaled before they run.
A crash is staged by writing what a killed process leaves in the store."""

import dataclasses

import pytest
from durable_world import UNCERTAIN, World, record, reply, use

from lattice import (
    Agent,
    ConcurrentQueryError,
    MemoryHistoryStore,
    Tool,
    define_history_store,
)
from lattice.testing import FunctionModelClient, history_problems

# -- new, ended, different ------------------------------------------------------------------------

def test_a_new_run_is_recorded_before_its_prompt_and_ended_with_its_result():
    order = []
    store = MemoryHistoryStore()
    world = World([{"content": [use("t1")], "usage": {"input_tokens": 5, "output_tokens": 1}}])
    spied = define_history_store(
        load=store.load, append=lambda m: (order.append(("append", m["role"])), store.append(m)),
        replace=store.replace, load_run=store.load_run,
        save_run=lambda r: (order.append(("run", r["state"], dict(r["started_calls"]))),
                            store.save_run(r)),
        list_runs=store.list_runs)
    result = world.agent(spied).prompt("go", run_id="job-1")
    assert (result.subtype, result.run_id, result.replayed) == ("success", "job-1", False)
    assert order[0] == ("run", "running", {}) and order[1] == ("append", "user")
    assert order.index(("run", "running", {"t1": 1})) < order.index(("append", "user"), 2)
    assert order[-1][:2] == ("run", "ended")
    saved = store.load_run("job-1")
    assert saved["result"]["result"] == "done" and saved["index"] == 0
    assert world.effects == [("charge", "t1", "job-1", 1)]


def test_an_ended_run_is_replayed_without_request_lock_or_history_change():
    store = MemoryHistoryStore()
    world = World()
    first = world.agent(store).prompt("go", run_id="r")
    before = list(store.messages)
    with store.lock():  # a replay takes no lock, so a held session does not stop it
        again = world.agent(store).prompt("go", run_id="r")
        items = list(world.agent(store).query("go", run_id="r"))
    assert len(world.requests) == 1 and store.messages == before
    assert again.replayed and again.run_id == "r"
    for attr in ("subtype", "is_error", "result", "num_turns", "stop_reason"):
        assert getattr(again, attr) == getattr(first, attr)
    assert again.usage == first.usage
    assert len(items) == 1 and items[0].replayed


def test_a_run_id_with_another_prompt_is_refused_when_query_is_called():
    store = MemoryHistoryStore()
    world = World()
    world.agent(store).prompt("go", run_id="r")
    agent = world.agent(store)
    with pytest.raises(ValueError, match="another prompt"):
        agent.query("something else", run_id="r")
    assert agent.prompt("next").subtype == "success"  # the guard was given back


@pytest.mark.parametrize("bad", ["", "x" * 201, "tab\there", "é", 5, b"r"])
def test_bad_run_ids_are_refused_by_name(bad):
    agent = World().agent(MemoryHistoryStore())
    with pytest.raises(ValueError, match="run_id"):
        agent.prompt("go", run_id=bad)
    assert agent.prompt("go", run_id="~" * 200).subtype == "success"


def test_a_store_that_cannot_record_runs_is_named():
    plain = define_history_store(load=lambda: [], append=lambda m: None)
    with pytest.raises(ValueError, match="records runs.*history store"):
        World().agent(plain).prompt("go", run_id="r")
    with pytest.raises(ValueError, match="records runs"):
        World().agent(None).query("go", run_id="r")


# -- a run left running -------------------------------------------------------------------------

def staged(*messages, **fields):
    """A store as a killed process leaves it: the run's messages and its record."""
    store = MemoryHistoryStore([{"role": "user", "content": "go"}, *messages])
    store.save_run(record(**fields))
    return store


def test_the_journal_settles_each_open_call_by_its_three_rules():
    store = staged(reply(use("c1"), use("c2"), use("l1", "lookup", key="k")),
                   started_calls={"c1": 1, "l1": 1})
    world = World()
    result = world.agent(store).prompt("go", run_id="r")
    assert result.subtype == "success" and not result.replayed
    # c1 started (not idempotent): unknown; c2 never started: runs; l1 started: runs again
    assert world.effects == [("charge", "c2", "r", 1), ("lookup", "l1", "r", 2)]
    results = {b["tool_use_id"]: b for b in store.messages[2]["content"]}
    assert results["c1"]["is_error"] and results["c1"]["content"] == UNCERTAIN
    assert results["c2"]["content"] == "charged 1" and results["l1"]["content"] == "value k"
    assert store.load_run("r")["started_calls"] == {"c1": 1, "c2": 1, "l1": 2}
    assert history_problems(store.messages) == []
    # the whole run's turns and usage: the stored reply and the new one
    assert result.num_turns == 2 and result.usage.input_tokens == 20
    assert len(world.requests) == 1


def test_a_stored_final_reply_ends_the_run_without_a_request():
    final = {"role": "assistant", "content": [{"type": "text", "text": "all done"}],
             "stop_reason": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 1}}
    store = staged(reply(use("l1", "lookup", key="k")),
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "l1",
                                                 "content": "v"}]}, final)
    world = World()
    result = world.agent(store).prompt("go", run_id="r")
    assert (result.subtype, result.result, result.num_turns) == ("success", "all done", 2)
    assert result.usage.input_tokens == 17 and world.requests == []
    assert store.load_run("r")["state"] == "ended"


def test_a_run_stopped_before_its_prompt_was_stored_appends_it_once():
    store = MemoryHistoryStore()
    store.save_run(record())
    world = World()
    assert world.agent(store).prompt("go", run_id="r").subtype == "success"
    assert [m["content"] for m in store.messages if m["role"] == "user"] == ["go"]


def test_max_turns_counts_the_replies_of_earlier_attempts():
    store = staged(reply(use("l1", "lookup", key="k")), started_calls={"l1": 1})
    world = World()
    result = world.agent(store, max_turns=1).prompt("go", run_id="r")
    assert result.subtype == "error_max_turns" and world.requests == []


def test_a_running_run_still_held_elsewhere_waits_then_is_busy():
    store = staged(reply(use("c1")))
    with store.lock():
        with pytest.raises(ConcurrentQueryError):
            World().agent(store).prompt("go", run_id="r")


# -- reads never write; another query supersedes ----------------------------------------------

def test_reading_a_session_whose_run_is_running_never_writes():
    store = staged(reply(use("c1")), started_calls={"c1": 1})
    before = list(store.messages)
    shown = World().agent(store).get_history()
    assert history_problems(shown) == []  # repaired in memory, for display
    assert store.messages == before  # the store is untouched: the resume settles it


def test_another_query_supersedes_a_running_run_which_then_replays_interrupted():
    store = staged(reply(use("c1"), use("c2")), started_calls={"c1": 1})
    world = World()
    assert world.agent(store).prompt("something new").subtype == "success"
    answers = {b["tool_use_id"]: b["content"] for b in store.messages[2]["content"]}
    assert answers["c1"] == UNCERTAIN and answers["c2"].startswith("The call was not run")
    assert world.effects == []  # nothing of the old run ran
    old = world.agent(store).prompt("go", run_id="r")
    assert (old.subtype, old.replayed, old.num_turns) == ("interrupted", True, 1)
    assert history_problems(store.messages) == []


# -- approvals are journaled -------------------------------------------------------------------------

def paused_store():
    paid = []

    def pay(args, context):
        paid.append(context.tool_use_id)
        return "paid"

    pay_tool = Tool("pay", "Pay.", {"type": "object"}, pay, requires_approval=True)
    model = FunctionModelClient(lambda r: {"content": [use("p1", "pay")]} if len(r.messages) == 1
                                else "ok")
    store = MemoryHistoryStore()

    def agent():
        return Agent(model="m", model_client=model, tools=[pay_tool], history_store=store)

    assert agent().prompt("pay the bill").subtype == "awaiting_approval"
    return store, agent, paid


def test_an_approved_call_a_crash_left_started_is_not_pending_and_not_paid_twice():
    store, agent, paid = paused_store()
    assert [c.id for c in agent().pending_approvals()] == ["p1"]
    # the approval query journaled p1 and died while it ran
    from lattice.durable.runs import approval_run_id

    rid = approval_run_id(store.messages[-1])
    store.save_run(record(rid, prompt=None, index=len(store.messages), approved=["p1"],
                          started_calls={"p1": 1}))
    assert agent().pending_approvals() == []
    with pytest.raises(ValueError, match="no tool call is waiting"):
        agent().prompt(approvals={"p1": True})
    assert agent().prompt("and now?").subtype == "success"
    assert paid == []
    answered = store.messages[-3]["content"][0]
    assert answered["tool_use_id"] == "p1" and answered["content"] == UNCERTAIN
    assert store.load_run(rid)["state"] == "ended"


def test_approvals_without_a_run_id_use_a_record_of_their_own():
    store, agent, paid = paused_store()
    assert agent().prompt(approvals={"p1": True}).subtype == "success"
    assert paid == ["p1"]
    [own] = store.list_runs()
    assert own["run_id"] == "approval:p1" and own["state"] == "ended"
    assert own["started_calls"] == {"p1": 1}


# -- replays rebuild what was recorded ---------------------------------------------------------------

@dataclasses.dataclass
class Answer:
    city: str
    degrees: int


def test_a_replay_rebuilds_the_structured_result_through_the_output_schema():
    model = FunctionModelClient(lambda r: {"content": [
        {"type": "tool_use", "id": "s1", "name": "submit_output",
         "input": {"city": "Oslo", "degrees": 3}}]})
    store = MemoryHistoryStore()
    first = Agent(model="m", model_client=model, output_schema=Answer,
                  history_store=store).prompt("weather?", run_id="w")
    again = Agent(model="m", model_client=model, output_schema=Answer,
                  history_store=store).prompt("weather?", run_id="w")
    assert again.structured_result == first.structured_result == Answer("Oslo", 3)


def test_a_replay_rebuilds_the_error_of_its_class():
    world = World([{"content": [use("l1", "lookup", key="k")]}] * 3)
    store = MemoryHistoryStore()
    first = world.agent(store, max_turns=2).prompt("go", run_id="r")
    again = world.agent(store, max_turns=2).prompt("go", run_id="r")
    assert first.subtype == again.subtype == "error_max_turns"
    assert type(again.error) is type(first.error) and str(again.error) == str(first.error)


def test_a_runs_own_record_writes_do_not_make_the_next_query_reload():
    class Counting(MemoryHistoryStore):
        loads = 0

        def load(self):
            Counting.loads += 1
            return super().load()

    store = Counting()
    world = World([{"content": [use("l1", "lookup", key="k")]}])
    agent = world.agent(store)
    agent.prompt("go", run_id="r")
    agent.prompt("and then")
    assert Counting.loads == 1
    store.append({"role": "user", "content": "someone else"})  # another writer: reloaded
    agent.prompt("once more")
    assert Counting.loads == 2
