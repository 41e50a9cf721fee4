"""SPEC conformance: tools (sections 1 and 3), end_turn, max_tokens, structured output (7)."""

import dataclasses
import json
import sys
import threading
from typing import List, Optional

import pytest
from helpers import (
    assert_well_formed,
    function_agent,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_use,
)

from lattice import (
    SUBMIT_OUTPUT_TOOL_NAME,
    AbortSignal,
    Agent,
    MissingOutputError,
    Tool,
    ToolContext,
    ToolResult,
    tool,
)
from lattice.testing import ScriptedModelClient

if sys.version_info >= (3, 11):
    from typing import TypedDict
else:  # pragma: no cover
    from typing_extensions import TypedDict


def only_results(agent, index=2):
    return results_of(agent.get_history()[index])


# -- the @tool decorator -----------------------------------------------------------------------

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


# -- tool execution ------------------------------------------------------------------------------

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


# -- end_turn ----------------------------------------------------------------------------------

def test_end_turn_first_in_batch_order_whole_batch_written_no_more_requests():
    calls = []

    def make(name, result):
        def handler(_input):
            calls.append(name)
            return result
        return Tool(name, name, {"type": "object"}, handler)

    tools = [make("plain", "p"), make("fin1", ToolResult("first final", end_turn=True)),
             make("fin2", ToolResult([{"type": "text", "text": "second"}], end_turn=True))]
    agent, client = scripted([reply(tool_use("plain", {}, "a"), tool_use("fin1", {}, "b"),
                                    tool_use("fin2", {}, "c"))], tools=tools)
    messages = run(agent)
    r = messages[-1]
    assert r.subtype == "success" and r.is_error is False
    assert r.result == "first final"
    assert r.num_turns == 1
    assert calls == ["plain", "fin1", "fin2"]
    assert len(client.requests) == 1
    assert [m.type for m in messages] == ["assistant", "user", "result"]
    assert [b["tool_use_id"] for b in only_results(agent)] == ["a", "b", "c"]
    assert_well_formed(agent.get_history())


def test_end_turn_in_parallel_batch_uses_batch_order():
    b_done = threading.Event()

    def slow_first(_input):
        b_done.wait(5)
        return ToolResult("from A", end_turn=True)

    def fast_second(_input):
        b_done.set()
        return ToolResult("from B", end_turn=True)

    tools = [Tool("a", "a", {"type": "object"}, slow_first),
             Tool("b", "b", {"type": "object"}, fast_second)]
    agent, _ = scripted([reply(tool_use("a", {}, "1"), tool_use("b", {}, "2"))], tools=tools,
                        parallel_tool_calls=True)
    assert agent.prompt("go").result == "from A"


# -- max_tokens --------------------------------------------------------------------------------

def test_max_tokens_on_text_is_success_with_truncated_text():
    agent, _ = scripted([reply("The answer is", stop_reason="max_tokens")])
    r = agent.prompt("go")
    assert (r.subtype, r.is_error, r.result, r.stop_reason) == (
        "success", False, "The answer is", "max_tokens")


def test_max_tokens_with_tool_use_runs_nothing_and_continues():
    calls = []
    t = Tool("write", "Write.", {"type": "object"}, lambda i: calls.append(i) or "written")
    agent, client = scripted([
        reply(tool_use("write", {"text": "a"}, "t1"), tool_use("write", {"text": "b"}, "t2"),
              stop_reason="max_tokens"),
        "ok, shorter",
    ], tools=[t])
    r = agent.prompt("go")
    assert calls == []
    blocks = only_results(agent)
    assert [b["tool_use_id"] for b in blocks] == ["t1", "t2"]
    for block in blocks:
        assert block.get("is_error") is True
        assert "max_tokens" in result_text(block)
        assert "short" in result_text(block).lower()
    assert r.subtype == "success" and r.result == "ok, shorter" and len(client.requests) == 2
    assert_well_formed(agent.get_history())


# -- structured output -------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}},
          "required": ["answer"]}


def submit(payload, id="s1"):
    return tool_use(SUBMIT_OUTPUT_TOOL_NAME, payload, id)


def test_submit_output_tool_injected_and_ends_query():
    agent, client = scripted([reply(submit({"answer": 42}))], output_schema=SCHEMA)
    messages = run(agent)
    r = messages[-1]
    assert r.subtype == "success" and r.is_error is False
    assert r.structured_result == {"answer": 42}
    assert json.loads(r.result) == {"answer": 42}
    [definition] = [t for t in client.requests[0].tools if t["name"] == "submit_output"]
    assert definition["input_schema"] == SCHEMA
    assert len(client.requests) == 1
    assert_well_formed(agent.get_history())


def test_invalid_payload_is_error_and_loop_continues():
    agent, client = scripted([reply(submit({"answer": "lots"}, "s1")),
                              reply(submit({"answer": 7}, "s2"))], output_schema=SCHEMA)
    r = agent.prompt("go")
    [block] = only_results(agent)
    assert block.get("is_error") is True and "answer" in result_text(block)
    assert r.structured_result == {"answer": 7} and len(client.requests) == 2


def test_missing_output_even_if_text_is_json():
    agent, _ = scripted(['{"answer": 1}'], output_schema=SCHEMA)
    r = agent.prompt("go")
    assert r.subtype == "error_missing_output" and r.is_error is True
    assert isinstance(r.error, MissingOutputError)
    assert r.structured_result is None


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Movie(TypedDict):
    title: str
    year: int


def test_dataclass_output_is_parsed_into_the_dataclass():
    agent, client = scripted([reply(submit({"x": 3, "y": 4}))], output_schema=Point)
    r = agent.prompt("go")
    assert r.structured_result == Point(3, 4)
    schema = [t for t in client.requests[0].tools if t["name"] == "submit_output"][0]
    assert set(schema["input_schema"]["properties"]) == {"x", "y"}


def test_dataclass_output_rejects_wrong_types():
    agent, _ = scripted([reply(submit({"x": "no"}, "s1")), reply(submit({"x": 1}, "s2"))],
                        output_schema=Point)
    assert agent.prompt("go").structured_result == Point(1, 0)
    assert only_results(agent)[0].get("is_error") is True


def test_typeddict_output():
    agent, _ = scripted([reply(submit({"title": "Alien"}, "s1")),
                         reply(submit({"title": "Alien", "year": 1979}, "s2"))],
                        output_schema=Movie)
    r = agent.prompt("go")
    assert r.structured_result == {"title": "Alien", "year": 1979}
    assert only_results(agent)[0].get("is_error") is True


class ParseSchema:
    def json_schema(self):
        return {"type": "object", "properties": {"n": {"type": "integer"}}}

    def parse(self, value):
        if value["n"] < 0:
            raise ValueError("n must be positive-ish")
        return ("parsed", value["n"])


def test_object_with_parse_and_json_schema():
    agent, client = scripted([reply(submit({"n": -1}, "s1")), reply(submit({"n": 5}, "s2"))],
                             output_schema=ParseSchema())
    r = agent.prompt("go")
    assert r.structured_result == ("parsed", 5)
    [block] = only_results(agent)
    assert block.get("is_error") is True and "n must be positive-ish" in result_text(block)
    tools = [t for t in client.requests[0].tools if t["name"] == "submit_output"]
    assert tools[0]["input_schema"] == ParseSchema().json_schema()


class FakePydanticModel:
    def __init__(self, **data):
        self.data = data

    def __eq__(self, other):
        return isinstance(other, FakePydanticModel) and other.data == self.data

    @classmethod
    def model_json_schema(cls):
        return {"type": "object", "properties": {"name": {"type": "string"}},
                "required": ["name"]}

    @classmethod
    def model_validate(cls, value):
        if value["name"] == "bad":
            raise ValueError("name may not be bad")
        return cls(**value)


def test_model_validate_class():
    agent, _ = scripted([reply(submit({"name": "bad"}, "s1")), reply(submit({"name": "ok"}, "s2"))],
                        output_schema=FakePydanticModel)
    r = agent.prompt("go")
    assert r.structured_result == FakePydanticModel(name="ok")
    assert "name may not be bad" in result_text(only_results(agent)[0])


def test_submit_output_must_be_alone_in_its_batch():
    calls = []
    other = Tool("other", "Other.", {"type": "object"}, lambda i: calls.append(i) or "x")
    agent, client = scripted([
        reply(submit({"answer": 1}, "s1"), tool_use("other", {}, "o1")),
        reply(submit({"answer": 2}, "s2"), submit({"answer": 3}, "s3")),
        reply(submit({"answer": 4}, "s4")),
    ], output_schema=SCHEMA, tools=[other])
    r = agent.prompt("go")
    assert calls == []
    history = agent.get_history()
    for index in (2, 4):
        blocks = results_of(history[index])
        assert len(blocks) == 2
        for block in blocks:
            assert block.get("is_error") is True
            assert "submit_output_exclusive_batch" in result_text(block)
    assert r.structured_result == {"answer": 4} and len(client.requests) == 3


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


def test_end_turn_with_block_content_and_result_stop_reason():
    fin = Tool("fin", "F.", {"type": "object"}, lambda i: ToolResult(
        [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}],
        end_turn=True))
    agent, _ = scripted([reply(tool_use("fin", {}, "f1"))], tools=[fin])
    r = agent.prompt("go")
    assert r.result == "part one, part two" and r.stop_reason == "tool_use"


class Opaque:
    def __repr__(self):
        return "<Opaque>"


@pytest.mark.parametrize("value", [{1, 2}, Opaque(), {"when": Opaque()}, b"bytes"])
def test_odd_return_values_keep_history_json_serialisable(value):
    agent, _ = scripted([reply(tool_use("ret", {}, "t1")), "done"], tools=[_returning(value)])
    assert agent.prompt("go").subtype == "success"
    json.dumps(agent.get_history())
    assert_well_formed(agent.get_history())


def test_null_usage_fields_count_as_zero():
    agent, _ = scripted([reply("x", usage={"input_tokens": None, "output_tokens": 3,
                                           "cache_read_input_tokens": None})])
    r = agent.prompt("go")
    assert r.usage.to_dict() == {"input_tokens": 0, "output_tokens": 3,
                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


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


def test_truncated_submit_output_is_not_accepted():
    agent, client = scripted([reply(submit({"answer": 1}, "s1"), stop_reason="max_tokens"),
                              reply(submit({"answer": 2}, "s2"))], output_schema=SCHEMA)
    r = agent.prompt("go")
    assert r.structured_result == {"answer": 2} and len(client.requests) == 2
    assert "max_tokens" in result_text(only_results(agent)[0])


@dataclasses.dataclass
class Wrapper:
    point: Point
    label: str


def test_nested_dataclass_output():
    agent, _ = scripted([reply(submit({"point": {"x": 1, "y": 2}, "label": "p"}))],
                        output_schema=Wrapper)
    r = agent.prompt("go")
    assert r.structured_result == Wrapper(Point(1, 2), "p")
