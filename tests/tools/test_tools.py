"""Tools (lattice/tools/definition.py, calls.py): @tool, Tool, handler returns, call errors (SPEC 1, 3)"""
import json
from typing import List, Optional

import pytest
from helpers import (
    function_agent,
    json_copy,
    reply,
    result_text,
    results_of,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    AbortSignal,
    Agent,
    Tool,
    ToolContext,
    ToolResult,
    tool,
)
from lattice.testing import ScriptedModelClient, assert_well_formed

# -- Tools (lattice/tools/definition.py, calls.py): @tool, Tool, handler returns, call errors (SPEC 1, 3) ---


def only_results(agent, index=2):
    return results_of(agent.get_history()[index])


def test_tool_decorator_defaults():
    @tool
    def get_weather(city: str, units: str = "c") -> str:
        """Get the weather for a city.

        Looks it up in a very reliable almanac.

        Args:
            city: The city name.
            units: The unit system.
        """
        return f"{city}:{units}"

    assert isinstance(get_weather, Tool)
    assert get_weather.name == "get_weather"
    desc = get_weather.description
    assert "Get the weather for a city." in desc
    assert "Looks it up in a very reliable almanac." in desc
    assert "Args" not in desc and "The city name." not in desc
    schema = get_weather.input_schema
    assert schema["type"] == "object"
    assert schema["properties"]["city"]["type"] == "string"
    assert schema["properties"]["city"].get("description") == "The city name."
    assert schema.get("required") == ["city"]


def test_tool_decorator_with_arguments():
    @tool(name="renamed", description="Custom description.")
    def original(x: int) -> int:
        """Docstring that is not used."""
        return x

    assert original.name == "renamed"
    assert original.description == "Custom description."

    @tool()
    def bare_call(x: int) -> int:
        """Bare."""
        return x

    assert bare_call.name == "bare_call" and bare_call.description == "Bare."


def test_tool_handler_gets_keyword_arguments():
    calls = []

    @tool
    def combine(first: str, second: int, *, third: bool = False) -> str:
        """Combine."""
        calls.append((first, second, third))
        return "ok"

    agent, _ = scripted([reply(tool_use("combine", {"second": 2, "first": "a", "third": True})),
                         "done"], tools=[combine])
    assert agent.prompt("go").result == "done"
    assert calls == [("a", 2, True)]


def test_tool_context_parameter_left_out_of_schema_and_passed():
    seen = {}

    @tool
    def probe(value: int, ctx: ToolContext) -> str:
        """Probe."""
        seen["ctx"] = ctx
        return str(value)

    assert set(probe.input_schema["properties"]) == {"value"}
    assert "ctx" not in probe.input_schema.get("required", [])
    agent, _ = scripted([reply(tool_use("probe", {"value": 1}, "call_9")), "done"], tools=[probe])
    agent.prompt("go")
    ctx = seen["ctx"]
    assert isinstance(ctx, ToolContext)
    assert isinstance(ctx.signal, AbortSignal)
    assert ctx.tool_use_id == "call_9"
    assert ctx.agent is agent


def test_explicit_tool_one_and_two_parameter_handlers():
    got = {}

    def one(input):
        got["one"] = input
        return "1"

    def two(input, context):
        got["two"] = (input, context)
        return "2"

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    t1, t2 = Tool("one", "One.", schema, one), Tool("two", "Two.", schema, two)
    assert (t1.name, t1.description, t1.input_schema) == ("one", "One.", schema)
    agent, _ = scripted([reply(tool_use("one", {"n": 1}, "a"), tool_use("two", {"n": 2}, "b")),
                         "done"], tools=[t1, t2])
    agent.prompt("go")
    assert got["one"] == {"n": 1}
    assert got["two"][0] == {"n": 2}
    assert isinstance(got["two"][1], ToolContext) and got["two"][1].tool_use_id == "b"
    assert [result_text(b) for b in only_results(agent)] == ["1", "2"]


def _returning(value):
    return Tool("ret", "Returns.", {"type": "object"}, lambda _input: value)


def _run_one(value):
    agent, _ = scripted([reply(tool_use("ret", {}, "t1")), "done"], tools=[_returning(value)])
    agent.prompt("go")
    [block] = only_results(agent)
    assert block["tool_use_id"] == "t1"
    return block


def test_return_tool_result_as_given():
    block = _run_one(ToolResult("custom", is_error=True))
    assert result_text(block) == "custom" and block.get("is_error") is True


def test_tool_result_defaults():
    r = ToolResult("x")
    assert (r.content, r.is_error, r.end_turn) == ("x", False, False)


def test_return_str_is_text():
    block = _run_one("plain text")
    assert result_text(block) == "plain text" and not block.get("is_error")


@pytest.mark.parametrize("value", [{"a": 1, "b": [True, None]}, 42, [1, 2], None, 2.5])
def test_return_other_values_are_json_text(value):
    block = _run_one(value)
    assert json.loads(result_text(block)) == value
    assert not block.get("is_error")


def test_return_list_of_blocks_as_blocks():
    blocks = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    block = _run_one(blocks)
    assert block["content"] == blocks


def test_input_validated_before_handler():
    calls = []
    schema = {"type": "object", "properties": {"count": {"type": "integer"}},
              "required": ["count"]}
    t = Tool("counter", "Counts.", schema, lambda i: calls.append(i) or "ok")
    agent, client = scripted([reply(tool_use("counter", {"count": "many"}, "t1")), "fixed"],
                             tools=[t])
    r = agent.prompt("go")
    assert calls == []
    [block] = only_results(agent)
    assert block.get("is_error") is True
    assert "count" in result_text(block)
    assert r.subtype == "success" and len(client.requests) == 2


def test_unknown_tool_is_an_error_result_and_loop_continues():
    agent, client = scripted([reply(tool_use("no_such_tool", {}, "t1")), "ok"])
    assert agent.prompt("go").subtype == "success"
    [block] = only_results(agent)
    assert block.get("is_error") is True and "no_such_tool" in result_text(block)
    assert len(client.requests) == 2


def test_handler_exception_text_has_type_and_message():
    def boom(_input):
        raise KeyError("missing-widget")

    agent, client = scripted([reply(tool_use("boom", {}, "t1")), "recovered"],
                             tools=[Tool("boom", "Boom.", {"type": "object"}, boom)])
    r = agent.prompt("go")
    [block] = only_results(agent)
    assert block.get("is_error") is True
    assert "KeyError" in result_text(block) and "missing-widget" in result_text(block)
    assert r.result == "recovered"


SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}},
          "required": ["answer"]}


def test_reserved_name_rejected_at_construction_and_add_tools():
    mine = Tool("submit_output", "Mine.", {"type": "object"}, lambda i: "x")
    with pytest.raises(ValueError, match="submit_output"):
        Agent(model="m", model_client=ScriptedModelClient([]), output_schema=SCHEMA, tools=[mine])
    agent = Agent(model="m", model_client=ScriptedModelClient([]), output_schema=SCHEMA)
    with pytest.raises(ValueError, match="submit_output"):
        agent.add_tools(mine)


def test_decorated_tool_with_optional_and_list_params():
    @tool
    def search(terms: List[str], limit: Optional[int] = None) -> str:
        """Search."""
        return f"{terms}:{limit}"

    agent, _ = scripted([reply(tool_use("search", {"terms": ["a"], "limit": 3}, "1"),
                               tool_use("search", {"terms": "not-a-list"}, "2")), "done"],
                        tools=[search])
    agent.prompt("go")
    first, second = only_results(agent)
    assert result_text(first) == "['a']:3" and not first.get("is_error")
    assert second.get("is_error") is True


def test_function_client_sees_the_tool_definitions():
    agent, client = function_agent(lambda r: reply(f"{len(r.tools)} tools"),
                                   tools=[_returning("x")])
    assert agent.prompt("go").result == "1 tools"


class Opaque:
    def __repr__(self):
        return "<Opaque>"


@pytest.mark.parametrize("value", [{1, 2}, Opaque(), {"when": Opaque()}, b"bytes"])
def test_odd_return_values_keep_history_json_serialisable(value):
    agent, _ = scripted([reply(tool_use("ret", {}, "t1")), "done"], tools=[_returning(value)])
    assert agent.prompt("go").subtype == "success"
    json.dumps(agent.get_history())
    assert_well_formed(json_copy(agent.get_history()))


@pytest.mark.parametrize("doc", [
    """Summary line.

    Body text.

    Parameters
    ----------
    x : int
        The x value.
    """,
    """Summary line.

    Body text.

    :param x: The x value.
    """,
    """Summary line.

    Body text.

    Args:
        x: The x value.
    """,
])
def test_tool_description_excludes_parameter_docs(doc):
    def fn(x: int) -> int:
        return x

    fn.__doc__ = doc
    made = tool(fn)
    assert made.description.startswith("Summary line.") and "Body text." in made.description
    assert "The x value." not in made.description
    assert made.input_schema["properties"]["x"]["description"] == "The x value."


def test_validation_lists_every_error():
    schema = {"type": "object", "properties": {"alpha": {"type": "integer"},
                                               "beta": {"type": "string"}}}
    calls = []
    t = Tool("v", "V.", schema, lambda i: calls.append(i) or "ok")
    agent, _ = scripted([reply(tool_use("v", {"alpha": "x", "beta": 5}, "1")), "done"], tools=[t])
    agent.prompt("go")
    text = result_text(only_results(agent)[0])
    assert "alpha" in text and "beta" in text and calls == []


# -- ToolContext annotation ------------------------------------------------------------------


def test_tool_context_type_annotation_works_with_decorator():
    @lattice.tool
    def check(ctx: ToolContext) -> str:
        """Check."""
        return type(ctx.signal).__name__

    agent, _ = scripted([reply(tool_use("check", {}, "1")), "done"], tools=[check])
    agent.prompt("go")
    assert result_text(results_of(agent.get_history()[2])[0]) == "AbortSignal"


def test_a_context_is_made_only_for_handlers_that_take_one_and_hooks_always_see_it():
    @tool
    def plain(n: int) -> str:
        """No context."""
        return f"plain {n}"

    @tool
    def aware(n: int, ctx: ToolContext) -> str:
        """Reads its context."""
        return f"aware {ctx.tool_use_id} {ctx.signal.aborted}"

    two_args = Tool("two", "Two parameters.", {"type": "object"},
                    lambda args, ctx: type(ctx).__name__)
    one_arg = Tool("one", "One parameter.", {"type": "object"}, lambda args: "one")
    assert (plain.takes_context, aware.takes_context) == (False, True)
    assert (two_args.takes_context, one_arg.takes_context) == (True, False)
    seen = []
    agent, _ = scripted([reply(tool_use("plain", {"n": 1}, "a"), tool_use("aware", {"n": 2}, "b"),
                               tool_use("two", {}, "c"), tool_use("one", {}, "d")), "done"],
                        tools=[plain, aware, two_args, one_arg],
                        before_tool_call=lambda call: seen.append(call.context) and None)
    assert agent.prompt("go").result == "done"
    assert [c["content"] for c in results_of(agent.get_history()[2])] == [
        "plain 1", "aware b False", "ToolContext", "one"]
    assert [(type(c).__name__, c.tool_use_id) for c in seen] == [
        ("ToolContext", i) for i in "abcd"]
