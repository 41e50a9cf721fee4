"""SPEC 22, approval bubbles up: a child's call that needs approval pauses the parent, whose
``pending_approvals()`` lists the child's calls with ``ToolCall.path``; ``approvals=`` resumes
the child, then the parent; across processes through a store."""

import threading

import pytest
from helpers import reply, tool_use

from lattice import Agent, MemoryHistoryStore, SqliteHistoryStore, Tool, ToolResult
from lattice.testing import FunctionModelClient, assert_well_formed


def delegate(name="payer", id="d1", prompt="pay the bill"):
    return tool_use(name, {"prompt": prompt}, id=id)


class World:
    """A parent that delegates to a child whose ``pay`` tool needs approval; the models
    answer from the conversation, so any number of Agents over one store agree."""

    def __init__(self):
        self.paid = []
        self.looked = []
        self.lock = threading.Lock()

    def pay_tool(self):
        def pay(input):
            with self.lock:
                self.paid.append(input["amount"])
            return f"paid {input['amount']}"
        return Tool("pay", "Pay.", {"type": "object", "properties": {
            "amount": {"type": "integer"}}}, pay, requires_approval=True)

    def look_tool(self):
        def look(input):
            self.looked.append(1)
            return "looked"
        return Tool("look", "Look.", {"type": "object"}, look)

    def child_model(self, request):
        last = request.messages[-1]
        if isinstance(last["content"], str):
            return reply(tool_use("pay", {"amount": 5}, id="c1"))
        block = last["content"][0]
        return f"child saw: {block['content']}"

    def parent_model(self, request):
        last = request.messages[-1]
        if last["content"] == "never mind":
            return "fine"
        if isinstance(last["content"], str):
            return reply(delegate(), tool_use("look", id="l1"))
        return "parent saw: " + " | ".join(str(b["content"]) for b in last["content"])

    def child(self, store=None):
        return Agent(model="child", name="payer", system="Pays bills.",
                     model_client=FunctionModelClient(self.child_model),
                     tools=[self.pay_tool()], history_store=store)

    def parent(self, store=None, child_store=None, **options):
        return Agent(model="parent", model_client=FunctionModelClient(self.parent_model),
                     tools=[self.child(child_store).as_tool(), self.look_tool()],
                     history_store=store, **options)


def test_the_parent_ends_awaiting_approval_with_the_childs_calls_and_their_path():
    world = World()
    parent = world.parent()
    result = parent.prompt("go")
    assert result.subtype == "awaiting_approval" and not result.is_error
    [call] = result.pending_approvals
    assert call.id == "c1" and call.name == "pay" and call.input == {"amount": 5}
    assert call.path == ["d1", "c1"]
    assert [c.id for c in parent.pending_approvals()] == ["c1"]
    assert parent.pending_approvals()[0].path == ["d1", "c1"]
    assert world.paid == [] and world.looked == [1]  # the sibling ran once
    assert_well_formed(parent.get_history())  # a paused conversation is well-formed


def test_approvals_resume_the_child_then_the_parent():
    world = World()
    parent = world.parent()
    parent.prompt("go")
    result = parent.prompt(approvals={"c1": True})
    assert result.subtype == "success"
    assert result.result == "parent saw: child saw: paid 5 | looked"
    assert world.paid == [5] and world.looked == [1]  # the sibling was not run again
    assert parent.pending_approvals() == []
    assert_well_formed(parent.get_history(), strict=True)


def test_a_denial_reaches_the_child():
    world = World()
    parent = world.parent()
    parent.prompt("go")
    result = parent.prompt(approvals={"c1": "too expensive"})
    assert result.result == "parent saw: child saw: too expensive | looked"
    assert world.paid == []


def test_approvals_must_name_the_childs_calls():
    world = World()
    parent = world.parent()
    parent.prompt("go")
    with pytest.raises(ValueError, match="c1"):
        parent.prompt(approvals={"d1": True})


def test_a_new_prompt_moves_on_and_keeps_the_siblings_result():
    world = World()
    parent = world.parent()
    parent.prompt("go")
    result = parent.prompt("never mind")
    assert result.subtype == "success"
    history = parent.get_history()
    answers = {b["tool_use_id"]: b for b in history[2]["content"]}
    assert answers["l1"]["content"] == "looked" and not answers["l1"].get("is_error")
    assert answers["d1"].get("is_error")
    assert_well_formed(history, strict=True)


def test_a_grandchilds_call_bubbles_up_two_levels():
    world = World()
    middle = Agent(model="m", name="middle", system="Middle.", tools=[world.child().as_tool()],
                   model_client=FunctionModelClient(
                       lambda r: reply(delegate(id="m1")) if isinstance(
                           r.messages[-1]["content"], str) else "middle done"))
    parent = Agent(model="p", tools=[middle.as_tool()], model_client=FunctionModelClient(
        lambda r: reply(delegate("middle", id="p1")) if isinstance(
            r.messages[-1]["content"], str) else "top done"))
    result = parent.prompt("go")
    assert result.subtype == "awaiting_approval"
    [call] = result.pending_approvals
    assert call.path == ["p1", "m1", "c1"] and call.id == "c1"
    assert parent.prompt(approvals={"c1": True}).result == "top done"
    assert world.paid == [5]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_across_processes_a_new_parent_agent_over_the_store_resumes(kind, tmp_path):
    world = World()
    store = MemoryHistoryStore() if kind == "memory" else SqliteHistoryStore(
        tmp_path / "h.db", "s1")
    assert world.parent(store).prompt("go").subtype == "awaiting_approval"
    fresh = world.parent(store)  # another process: nothing in memory but the store
    assert [(c.id, c.path) for c in fresh.pending_approvals()] == [("c1", ["d1", "c1"])]
    result = world.parent(store).prompt(approvals={"c1": True})
    assert result.result == "parent saw: child saw: paid 5 | looked"
    assert world.paid == [5] and world.looked == [1]
    assert_well_formed(store.load(), strict=True)


def test_a_tool_result_decision_answers_the_childs_call():
    world = World()
    parent = world.parent()
    parent.prompt("go")
    result = parent.prompt(approvals={"c1": ToolResult("paid by hand")})
    assert result.result == "parent saw: child saw: paid by hand | looked"


def test_a_pause_with_a_parent_run_id_is_recorded_and_resumed():
    world = World()
    store = MemoryHistoryStore()
    first = world.parent(store).prompt("go", run_id="job-1")
    assert first.subtype == "awaiting_approval"
    again = world.parent(store).prompt("go", run_id="job-1")  # a redelivered job
    assert again.replayed and [c.id for c in again.pending_approvals] == ["c1"]
    assert world.parent(store).prompt(approvals={"c1": True}).subtype == "success"
    assert world.paid == [5]


def test_a_follower_sees_a_pause_without_a_rewrite():
    from lattice import follow

    world = World()
    store = MemoryHistoryStore()
    world.parent(store).prompt("go", run_id="job")
    items = list(follow(store, run_id="job", wait_s=0))
    assert [m.type for m in items] == ["user", "assistant", "result"]
    assert items[-1].subtype == "awaiting_approval"


def test_a_finished_sibling_subagent_is_not_run_again_and_a_child_may_pause_twice():
    world = World()
    asked = []

    def twice(request):  # pays twice, one approval each time
        last = request.messages[-1]["content"]
        paid = sum(1 for m in request.messages if m["role"] == "assistant")
        if isinstance(last, str) or paid < 2:
            return reply(tool_use("pay", {"amount": paid + 1}, id=f"c{paid + 1}"))
        return "paid twice"

    def quick(request):
        asked.append(1)
        return "quick answer"

    payer = Agent(model="c", name="payer", system="Pays.", tools=[world.pay_tool()],
                  model_client=FunctionModelClient(twice))
    helper = Agent(model="h", name="helper", system="Helps.",
                   model_client=FunctionModelClient(quick))
    parent = Agent(model="p", parallel_tool_calls=True,
                   tools=[payer.as_tool(), helper.as_tool()],
                   model_client=FunctionModelClient(
                       lambda r: reply(delegate(), delegate("helper", id="h1")) if isinstance(
                           r.messages[-1]["content"], str) else "both done"))
    first = parent.prompt("go")
    assert [c.path for c in first.pending_approvals] == [["d1", "c1"]]
    second = parent.prompt(approvals={"c1": True})
    assert second.subtype == "awaiting_approval"
    assert [c.path for c in second.pending_approvals] == [["d1", "c2"]]
    third = parent.prompt(approvals={"c2": True})
    assert third.result == "both done"
    assert world.paid == [1, 2] and len(asked) == 1
    results = {b["tool_use_id"]: b["content"] for b in parent.get_history()[2]["content"]}
    assert results == {"d1": "paid twice", "h1": "quick answer"}
    assert_well_formed(parent.get_history(), strict=True)


def test_a_follower_of_a_paused_run_sees_the_childs_messages_when_asked(tmp_path):
    from lattice import follow

    world = World()
    store = SqliteHistoryStore(tmp_path / "h.db", "s1")
    world.parent(store).prompt("go", run_id="job")
    items = list(follow(store, run_id="job", wait_s=0, include_subagent_messages=True))
    # as query(include_subagent_messages=True) yields them, and the prompts: the parent's
    # reply, then the child's prompt and its reply asking to pay, then the paused result
    assert [(m.type, m.parent_tool_use_id) for m in items] == [
        ("user", None), ("assistant", None), ("user", "d1"), ("assistant", "d1"),
        ("result", None)]
    assert items[2].content == "pay the bill"
    assert items[-1].subtype == "awaiting_approval"
