"""Tool hooks and approval (SPEC 12): hooks in sequential and parallel batches, the
awaiting_approval ending, resuming with approvals=, across processes and stores."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from helpers import reply, tool_use

from lattice import AbortController, Agent, Tool, ToolCall, ToolResult, tool
from lattice.stores import JsonlHistoryStore, SqliteHistoryStore
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed

ROOT = str(Path(__file__).resolve().parents[2])


def make_tools(ran):
    def add(args):
        ran.append(("add", args))
        return args["a"] + args["b"]

    def send(args):
        ran.append(("send", args))
        return f"sent to {args['to']}"

    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "integer"}},
              "required": ["a", "b"]}
    return [Tool("add", "Add.", schema, add),
            Tool("send", "Send mail.", {"type": "object", "properties": {"to": {"type": "string"}}},
                 send, requires_approval=True)]


# -- hooks -------------------------------------------------------------------------------------

@pytest.mark.parametrize("parallel", [False, True])
def test_hooks_deny_replace_input_and_replace_result(parallel):
    ran = []

    def before(call: ToolCall):
        assert call.context.signal is not None and call.tool.name == call.name
        if call.id == "deny":
            return ToolResult("Not allowed.", is_error=True)
        if call.id == "change":
            return {"a": 10, "b": 20}
        return None

    def after(call, result):
        if call.id == "redact":
            return ToolResult("[redacted]")
        return None

    uses = [tool_use("add", {"a": 1, "b": 2}, id=i) for i in ("deny", "change", "redact", "plain")]
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(*uses), "done"]),
                  tools=make_tools(ran)[:1], before_tool_call=before, after_tool_call=after,
                  parallel_tool_calls=parallel)
    agent.prompt("go")
    blocks = agent.get_history()[2]["content"]
    assert [b["content"] for b in blocks] == ["Not allowed.", "30", "[redacted]", "3"]
    assert blocks[0]["is_error"] and sorted(a["a"] for _, a in ran) == [1, 1, 10]


def test_hook_exceptions_and_bad_returns_become_error_results():
    def before(call):
        if call.id == "1":
            raise RuntimeError("hook broke")
        if call.id == "2":
            return 42
        return {"a": "not an int", "b": 1}

    uses = [tool_use("add", {"a": 1, "b": 2}, id=i) for i in ("1", "2", "3")]
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(*uses), "done"]),
                  tools=make_tools([])[:1], before_tool_call=before)
    agent.prompt("go")
    blocks = agent.get_history()[2]["content"]
    assert all(b["is_error"] for b in blocks)
    assert "hook broke" in blocks[0]["content"] and "ToolResult" in blocks[1]["content"]
    assert "Invalid input" in blocks[2]["content"]


def test_hooks_do_not_run_for_unknown_tools_or_invalid_input_and_must_be_callable():
    seen = []
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("nope", id="1"), tool_use("add", {"a": "x"}, id="2")), "done"]),
        tools=make_tools([])[:1], before_tool_call=seen.append,
        after_tool_call=lambda c, r: seen.append(c))
    agent.prompt("go")
    assert seen == []
    for option in ("before_tool_call", "after_tool_call", "requires_approval"):
        with pytest.raises(ValueError, match=option):
            Agent(model="m", model_client=ScriptedModelClient([]), **{option: "yes"})


def test_after_hook_always_receives_a_tool_result():
    got = []
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("add", {"a": 1, "b": 2}, id="1")), "done"]),
        tools=make_tools([])[:1], after_tool_call=lambda c, r: got.append(r))
    agent.prompt("go")
    assert isinstance(got[0], ToolResult) and got[0].content == 3


# -- approval ----------------------------------------------------------------------------------

def pending_agent(ran, replies, **options):
    client = ScriptedModelClient(replies)
    return Agent(model="m", model_client=client, tools=make_tools(ran), **options), client


def test_a_batch_needing_approval_pauses_before_any_call_runs():
    ran = []
    agent, client = pending_agent(ran, [reply(tool_use("add", {"a": 1, "b": 2}, id="a1"),
                                              tool_use("send", {"to": "bob"}, id="s1")),
                                        "all done"])
    messages = list(agent.query("go"))
    assert [m.type for m in messages] == ["assistant", "result"]
    result = messages[-1]
    assert result.subtype == "awaiting_approval" and not result.is_error and ran == []
    assert [c.id for c in result.pending_approvals] == ["s1"]
    history = agent.get_history()
    assert history[-1]["pending_approval"] is True
    assert [c.name for c in agent.pending_approvals()] == ["send"]
    resumed = list(agent.query(approvals={"s1": True}))
    assert resumed[0].type == "user" and resumed[-1].result == "all done"
    assert resumed[-1].num_turns == 1
    assert [name for name, _ in ran] == ["add", "send"]
    assert "pending_approval" not in client.requests[1].messages[1]  # SDK key stripped
    assert_well_formed(agent.get_history())
    assert agent.pending_approvals() == []


@pytest.mark.parametrize("decision,expected", [
    (True, "sent to bob"), (False, "did not approve"), ("Not today.", "Not today."),
    (ToolResult("pretend sent"), "pretend sent")])
def test_all_four_decision_forms(decision, expected):
    ran = []
    agent, _ = pending_agent(ran, [reply(tool_use("send", {"to": "bob"}, id="s1")), "ok"])
    assert agent.prompt("go").subtype == "awaiting_approval"
    assert agent.prompt(approvals={"s1": decision}).result == "ok"
    block = agent.get_history()[2]["content"][0]
    assert expected in block["content"]
    assert block.get("is_error", False) == (decision is not True and
                                            not isinstance(decision, ToolResult))


def test_per_call_predicate_and_a_prompt_given_with_approvals():
    ran = []
    agent, client = pending_agent(
        ran, [reply(tool_use("add", {"a": 1, "b": 2}, id="small"),
                    tool_use("add", {"a": 100, "b": 2}, id="big")), "done"],
        requires_approval=lambda call: call.input.get("a", 0) > 50)
    result = agent.prompt("go")
    assert [c.id for c in result.pending_approvals] == ["big"]
    agent.prompt("and hurry", approvals={"big": False})
    sent = client.requests[1].messages
    assert sent[-1] == {"role": "user", "content": "and hurry"}
    assert ran == [("add", {"a": 1, "b": 2})]


def test_bad_approvals_raise_before_anything_runs():
    ran = []
    agent, client = pending_agent(ran, [reply(tool_use("send", {"to": "x"}, id="s1")), "ok"])
    with pytest.raises(ValueError, match="no tool call is waiting"):
        agent.prompt(approvals={"s1": True})
    agent.prompt("go")
    for bad in ({}, {"s1": True, "zz": True}, {"s1": 3}):
        with pytest.raises(ValueError):
            agent.prompt(approvals=bad)
    with pytest.raises(ValueError, match="prompt is required"):
        agent.prompt()
    assert ran == [] and len(client.requests) == 1
    assert agent.prompt(approvals={"s1": True}).result == "ok"


@pytest.mark.parametrize("consent", ["yes", "Y", "true", "OK", "approve", "Approved", "1",
                                     " yes "])
def test_a_str_that_reads_as_consent_is_refused_saying_to_pass_true(consent):
    """SPEC 16a: a str decision denies with that reason, so one that reads as consent is
    surely a mistake: ValueError before anything runs, and the call stays pending."""
    ran = []
    agent, client = pending_agent(ran, [reply(tool_use("send", {"to": "x"}, id="s1")), "ok"])
    agent.prompt("go")
    with pytest.raises(ValueError, match=r"approvals\['s1'\].*pass True") as caught:
        agent.prompt(approvals={"s1": consent})
    assert repr(consent) in str(caught.value)
    with pytest.raises(ValueError, match="pass True"):
        agent.query(approvals={"s1": consent})
    assert ran == [] and len(client.requests) == 1
    assert [c.id for c in agent.pending_approvals()] == ["s1"]
    # Reasons that merely start like consent still deny, with their text.
    assert agent.prompt(approvals={"s1": "yes, but not today"}).result == "ok"
    block = agent.get_history()[2]["content"][0]
    assert block == {"type": "tool_result", "tool_use_id": "s1",
                     "content": "yes, but not today", "is_error": True}
    assert ran == []


def test_moving_on_answers_the_pending_calls():
    ran = []
    agent, client = pending_agent(ran, [reply(tool_use("send", {"to": "x"}, id="s1")),
                                        "fine"])
    agent.prompt("go")
    assert agent.prompt("never mind").result == "fine"
    sent = client.requests[1].messages
    assert "moved on" in sent[2]["content"][0]["content"] and sent[3]["content"] == "never mind"
    assert ran == []
    assert_well_formed(agent.get_history())


def test_abort_and_interrupt_during_the_resumed_batch():
    started, release = threading.Event(), threading.Event()

    def slow(args):
        started.set()
        release.wait(10)
        return "slow done"

    tools = [Tool("slow", "S.", {"type": "object"}, slow, requires_approval=True),
             Tool("after", "A.", {"type": "object"}, lambda a: "after")]
    for how in ("abort", "interrupt"):
        started.clear()
        release.clear()
        agent = Agent(model="m", model_client=ScriptedModelClient(
            [reply(tool_use("slow", id="1"), tool_use("after", id="2")), "x"]), tools=tools)
        assert agent.prompt("go").subtype == "awaiting_approval"
        controller = AbortController()
        fire = controller.abort if how == "abort" else agent.interrupt
        threading.Thread(target=lambda f=fire: started.wait(10) and (f(), release.set())).start()
        result = agent.prompt(approvals={"1": True}, signal=controller.signal)
        assert result.subtype == ("error_abort" if how == "abort" else "interrupted")
        assert_well_formed(agent.get_history())


def test_compaction_with_a_pending_tail_keeps_it_pending():
    ran = []
    usage = {"input_tokens": 500}

    def model(request):
        if request.system is None:
            return reply("summary")
        if request.messages == [{"role": "user", "content": "go"}]:
            return reply(tool_use("send", {"to": "x"}, id="s1"), usage=usage)
        return "done"

    agent = Agent(model="m", model_client=FunctionModelClient(model), tools=make_tools(ran),
                  system="sys", auto_compact={"threshold_tokens": 100,
                                              "keep_recent_messages": 0})
    assert agent.prompt("go").subtype == "awaiting_approval"
    assert agent.pending_approvals()[0].id == "s1"
    messages = list(agent.query(approvals={"s1": True}))
    assert [m.type for m in messages] == ["user", "system", "assistant", "result"]
    assert messages[-1].result == "done" and ran == [("send", {"to": "x"})]
    assert_well_formed(agent.get_history())


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_approval_across_processes(tmp_path, kind):
    """Process A ends awaiting approval; process B lists, approves one, denies one and
    finishes the conversation on the same store."""
    path = tmp_path / ("chat.jsonl" if kind == "jsonl" else "chat.db")
    common = textwrap.dedent(f"""
        import json, sys
        from lattice import Agent, Tool
        from lattice.stores import JsonlHistoryStore, SqliteHistoryStore
        from lattice.testing import ScriptedModelClient
        path = {str(path)!r}
        store = (JsonlHistoryStore(path) if {kind!r} == "jsonl"
                 else SqliteHistoryStore(path, "user-1"))
        tools = [Tool("send", "S.", {{"type": "object"}}, lambda a: "sent " + a["to"],
                      requires_approval=True)]
        uses = [{{"type": "tool_use", "id": i, "name": "send", "input": {{"to": i}}}}
                for i in ("alice", "bob")]
        replies = [{{"role": "assistant", "content": uses}}, "finished"]
    """)
    a = common + textwrap.dedent("""
        agent = Agent(model="m", model_client=ScriptedModelClient(replies[:1]),
                      tools=tools, history_store=store)
        print(agent.prompt("mail them").subtype)
    """)
    b = common + textwrap.dedent("""
        agent = Agent(model="m", model_client=ScriptedModelClient(replies[1:]),
                      tools=tools, history_store=store)
        pending = [c.id for c in agent.pending_approvals()]
        result = agent.prompt(approvals={"alice": True, "bob": "No."})
        print(json.dumps([pending, result.result]))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out_a = subprocess.run([sys.executable, "-c", a], env=env, capture_output=True, text=True,
                           timeout=60)
    assert out_a.stdout.strip() == "awaiting_approval", out_a.stderr
    out_b = subprocess.run([sys.executable, "-c", b], env=env, capture_output=True, text=True,
                           timeout=60)
    assert out_b.stdout.strip() == '[["alice", "bob"], "finished"]', out_b.stderr
    store = JsonlHistoryStore(path) if kind == "jsonl" else SqliteHistoryStore(path, "user-1")
    final = Agent(model="m", model_client=ScriptedModelClient([]), history_store=store)
    history = final.get_history()
    assert_well_formed(history)
    assert [b["content"] for b in history[2]["content"]] == ["sent alice", "No."]


def test_decorated_tool_flags():
    @tool(requires_approval=True, strict=True)
    def wire(amount: int) -> str:
        """Wire money."""
        return "wired"

    assert wire.requires_approval and wire.definition["strict"] is True
    with pytest.raises(ValueError, match="requires_approval"):
        Tool("t", "T.", {"type": "object"}, lambda a: 1, requires_approval="yes")


def test_bad_approvals_fail_when_query_is_called_and_leave_the_agent_free():
    ran = []
    agent, client = pending_agent(ran, [reply(tool_use("send", {"to": "x"}, id="s1")), "ok"])
    agent.prompt("go")
    with pytest.raises(ValueError, match="missing"):
        agent.query(approvals={"zz": True})  # raised by the call, not at the first next()
    assert agent.prompt(approvals={"s1": True}).result == "ok" and ran
