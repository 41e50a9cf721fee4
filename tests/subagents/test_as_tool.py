"""SPEC 22, the tool itself: ``Agent.as_tool(...)`` defaults, what its result is, isolated and
shared children, parallel isolated calls, error results, cycles."""

import json
import threading
import time

import pytest
from helpers import WAIT_S, reply, tool_use

from lattice import Agent, Tool, ToolResult
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed


def child_agent(replies=None, fn=None, **options):
    client = FunctionModelClient(fn) if fn is not None else ScriptedModelClient(replies or [])
    options.setdefault("name", "helper")
    options.setdefault("system", "Summarise what you are given.\nBe short.")
    return Agent(model="child-model", model_client=client, **options), client


def delegate(tool_name="helper", id="d1", **input):
    return tool_use(tool_name, input or {"prompt": "sum it up"}, id=id)


def parent_agent(tools, replies, **options):
    client = ScriptedModelClient(replies)
    return Agent(model="parent-model", model_client=client, tools=tools, **options), client


def tool_result_of(agent, id):
    for message in agent.get_history():
        if message["role"] == "user" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_result" and block.get("tool_use_id") == id:
                    return block
    raise AssertionError(f"no tool_result for {id}")


# -- the defaults --------------------------------------------------------------------------------

def test_defaults_name_description_and_schema_come_from_the_child():
    child, _ = child_agent(["x"])
    made = child.as_tool()
    assert isinstance(made, Tool)
    assert made.name == "helper"
    assert made.description == "Summarise what you are given."
    assert made.input_schema == {"type": "object", "properties": {"prompt": {"type": "string"}},
                                 "required": ["prompt"]}
    assert made.idempotent is True  # a subagent tool is idempotent by construction


def test_the_options_override_the_defaults():
    child, _ = child_agent(["x"])
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    made = child.as_tool(name="sum", description="Sums up.", input_schema=schema,
                         idempotent=False)
    assert (made.name, made.description, made.input_schema) == ("sum", "Sums up.", schema)
    assert made.idempotent is False


def test_a_name_is_required_when_the_child_has_none():
    child = Agent(model="m", model_client=ScriptedModelClient([]))
    with pytest.raises(ValueError, match="name"):
        child.as_tool()
    assert child.as_tool(name="ok").name == "ok"


@pytest.mark.parametrize("bad", [dict(output="text"), dict(isolated="yes"),
                                 dict(idempotent=1), dict(name=""), dict(name=3)])
def test_bad_options_are_value_errors_naming_them(bad):
    child, _ = child_agent(["x"])
    with pytest.raises(ValueError, match=list(bad)[0]):
        child.as_tool(**bad)


def test_the_name_option_is_checked():
    with pytest.raises(ValueError, match="name"):
        Agent(model="m", model_client=ScriptedModelClient([]), name=42)


# -- what the tool returns -------------------------------------------------------------------------

def test_the_tool_result_is_the_childs_result_and_the_prompt_is_the_prompt_field():
    child, child_client = child_agent(["the summary"])
    parent, parent_client = parent_agent([child.as_tool()], [reply(delegate()), "done"])
    result = parent.prompt("go")
    assert result.subtype == "success" and result.result == "done"
    assert child_client.requests[0].messages == [{"role": "user", "content": "sum it up"}]
    assert child_client.requests[0].system == "Summarise what you are given.\nBe short."
    block = tool_result_of(parent, "d1")
    assert block["content"] == "the summary" and not block.get("is_error")
    assert child.get_history() == []  # isolated: the template's own conversation is untouched


def test_another_schema_sends_its_input_as_json_text():
    child, child_client = child_agent(["ok"])
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "days": {"type": "integer"}}}
    parent, _ = parent_agent([child.as_tool(input_schema=schema)],
                             [reply(delegate(city="Oslo", days=3)), "done"])
    parent.prompt("go")
    sent = child_client.requests[0].messages[0]["content"]
    assert json.loads(sent) == {"city": "Oslo", "days": 3}


def test_output_structured_gives_the_structured_result_as_json():
    answer = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    child, _ = child_agent([reply(tool_use("submit_output", {"n": 7}, id="s"))],
                           output_schema=answer)
    parent, _ = parent_agent([child.as_tool(output="structured")], [reply(delegate()), "done"])
    parent.prompt("go")
    assert json.loads(tool_result_of(parent, "d1")["content"]) == {"n": 7}


@pytest.mark.parametrize("case", ["max_turns", "raised", "timeout"])
def test_an_error_result_of_the_child_is_an_is_error_tool_result_and_the_parent_goes_on(case):
    from lattice import OverloadedError

    if case == "max_turns":
        child, _ = child_agent([reply(tool_use("nothing", id="n1"))] * 3, max_turns=1)
        word = "max_turns"
    elif case == "raised":
        def fail(request):
            raise OverloadedError("the child's provider is overloaded")
        child, _ = child_agent(fn=fail)
        word = "overloaded"
    else:
        def slow(request):
            request.signal.wait(WAIT_S)
            return "late"
        child, _ = child_agent(fn=slow, request_timeout_ms=50)
        word = "timeout"
    parent, _ = parent_agent([child.as_tool()], [reply(delegate()), "went on"])
    result = parent.prompt("go")
    assert result.subtype == "success" and result.result == "went on"
    block = tool_result_of(parent, "d1")
    assert block.get("is_error") is True
    assert word in block["content"].lower()
    assert_well_formed(parent.get_history())


# -- isolation -----------------------------------------------------------------------------------

def test_isolated_calls_each_run_on_a_fresh_conversation():
    child, child_client = child_agent(["one", "two"])
    parent, _ = parent_agent([child.as_tool()], [reply(delegate(id="a")), reply(delegate(id="b")),
                                                 "done"])
    parent.prompt("go")
    assert [len(r.messages) for r in child_client.requests] == [1, 1]
    assert child.get_history() == []


def test_a_shared_child_runs_every_call_on_its_own_conversation():
    child, child_client = child_agent(["one", "two"])
    parent, _ = parent_agent([child.as_tool(isolated=False)],
                             [reply(delegate(id="a")), reply(delegate(id="b")), "done"])
    parent.prompt("go")
    assert [len(r.messages) for r in child_client.requests] == [1, 3]
    assert [m["role"] for m in child.get_history()] == ["user", "assistant"] * 2


def gated_child(started, release, **options):
    def model(request):
        started.append(time.monotonic())
        assert release.wait(WAIT_S)
        return "answer"
    return child_agent(fn=model, **options)


def test_a_second_concurrent_call_of_a_shared_child_is_an_is_error_saying_busy():
    started, release = [], threading.Event()
    child, _ = gated_child(started, release)

    def let_go(call, result):
        release.set()  # the first call to finish lets the other one go
        return None

    parent, _ = parent_agent([child.as_tool(isolated=False)],
                             [reply(delegate(id="a"), delegate(id="b")), "done"],
                             parallel_tool_calls=True, after_tool_call=let_go)
    assert parent.prompt("go").subtype == "success"
    blocks = [tool_result_of(parent, "a"), tool_result_of(parent, "b")]
    errors = [b for b in blocks if b.get("is_error")]
    assert len(errors) == 1 and "busy" in errors[0]["content"]
    assert len(started) == 1


def test_parallel_isolated_calls_run_at_the_same_time():
    started, release = [], threading.Event()
    child, _ = gated_child(started, release)

    def watcher():
        deadline = time.monotonic() + WAIT_S
        while len(started) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        release.set()  # only once all three are in their model call at once

    threading.Thread(target=watcher, daemon=True).start()
    parent, _ = parent_agent([child.as_tool()],
                             [reply(delegate(id="a"), delegate(id="b"), delegate(id="c")),
                              "done"], parallel_tool_calls=True)
    assert parent.prompt("go").subtype == "success"
    assert len(started) == 3
    assert max(started) - min(started) < WAIT_S / 2
    assert all(tool_result_of(parent, i)["content"] == "answer" for i in "abc")


# -- child tools, other providers ------------------------------------------------------------------

def test_a_child_runs_its_own_tools_and_may_use_another_client():
    calls = []

    def count(text: str) -> int:
        """Count letters."""
        calls.append(text)
        return len(text)

    child, _ = child_agent([reply(tool_use("count", {"text": "abc"}, id="c1")), "3 letters"],
                           tools=[count])
    parent, _ = parent_agent([child.as_tool()], [reply(delegate()), "done"])
    parent.prompt("go")
    assert calls == ["abc"]
    assert tool_result_of(parent, "d1")["content"] == "3 letters"


def test_depth_is_unlimited():
    inner, _ = child_agent(["deepest"], name="inner")
    middle, _ = child_agent([reply(delegate("inner", id="m1")), "middle got it"],
                            name="middle", tools=[inner.as_tool()])
    parent, _ = parent_agent([middle.as_tool()], [reply(delegate("middle")), "top"])
    assert parent.prompt("go").result == "top"
    assert tool_result_of(parent, "d1")["content"] == "middle got it"


# -- cycles ----------------------------------------------------------------------------------------

def test_an_agent_that_is_its_own_descendant_raises_value_error_when_called():
    looping = Agent(model="m", name="loop", model_client=ScriptedModelClient(
        [reply(delegate("loop", id="l1"))] * 3))
    looping.add_tools(looping.as_tool())
    with pytest.raises(ValueError, match="cycle"):
        looping.prompt("go")
    assert_well_formed(looping.get_history())


def test_a_longer_cycle_raises_too():
    a = Agent(model="m", name="a", model_client=ScriptedModelClient(
        [reply(delegate("b", id="ab"))] * 3))
    b = Agent(model="m", name="b", model_client=ScriptedModelClient(
        [reply(delegate("a", id="ba"))] * 3))
    a.add_tools(b.as_tool())
    b.add_tools(a.as_tool())
    with pytest.raises(ValueError, match="cycle"):
        a.prompt("go")


def test_the_same_child_twice_in_one_parent_is_not_a_cycle():
    child, _ = child_agent(["one", "two"])
    parent, _ = parent_agent([child.as_tool()], [reply(delegate(id="a"), delegate(id="b")),
                                                 "done"])
    assert parent.prompt("go").subtype == "success"


def test_tool_results_returned_by_a_hook_still_work_for_subagent_tools():
    child, client = child_agent(["never"])
    parent, _ = parent_agent([child.as_tool()], [reply(delegate()), "done"],
                             before_tool_call=lambda call: ToolResult("denied", is_error=True))
    parent.prompt("go")
    assert client.calls == 0 and tool_result_of(parent, "d1")["content"] == "denied"


def test_output_structured_needs_a_child_with_an_output_schema():
    child, _ = child_agent(["x"])  # no output_schema, no output_format: no structured_result
    with pytest.raises(ValueError, match="output='structured'.*output_schema"):
        child.as_tool(output="structured")


def test_the_default_schema_given_explicitly_still_sends_the_prompt_field():
    from lattice.subagents import PROMPT_SCHEMA

    seen = []
    child, _ = child_agent(fn=lambda request: (seen.append(request.messages[0]), "ok")[1])
    schema = json.loads(json.dumps(PROMPT_SCHEMA))  # equal, not the same object
    parent, _ = parent_agent([child.as_tool(input_schema=schema)],
                             [reply(delegate(prompt="find it")), "done"])
    parent.prompt("go")
    assert seen[0]["content"] == "find it"
