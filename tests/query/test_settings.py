"""Bad options fail at construction (or at query) with a ValueError naming them."""

import pytest
from helpers import (
    MODEL,
    function_agent,
    reply,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    Agent,
    Tool,
    create_agent,
    tool,
)
from lattice.testing import ScriptedModelClient


def client():
    return ScriptedModelClient(["ok"])


@pytest.mark.parametrize("option,value", [
    ("max_turns", 0), ("max_turns", -1), ("max_turns", True), ("max_turns", 1.5),
    ("max_tokens", 0), ("request_timeout_ms", 0), ("request_timeout_ms", True),
    ("request_timeout_ms", -5), ("request_timeout_ms", 1.5), ("request_timeout_ms", "100"),
    ("include_partial_messages", "yes"), ("parallel_tool_calls", 1), ("system", 5),
    ("on_model_request", "hook"), ("max_output_retries", -1), ("extra", [1]),
    ("history_store", object()),
])
def test_bad_option_names_option_and_value(option, value):
    with pytest.raises(ValueError) as info:
        Agent(model="m", model_client=client(), **{option: value})
    assert option in str(info.value) and repr(value) in str(info.value)


@pytest.mark.parametrize("value", [{"threshold_tokens": 0}, {"threshold_tokens": -1},
                                   {"keep_recent_messages": -1}, "yes", {"nope": 1}])
def test_bad_auto_compact(value):
    with pytest.raises(ValueError, match="auto_compact|threshold|keep_recent|nope"):
        Agent(model="m", model_client=client(), auto_compact=value)


def test_model_required_without_client():
    with pytest.raises(ValueError, match="model"):
        Agent()


def test_bad_model_client():
    with pytest.raises(ValueError, match="model_client"):
        Agent(model="m", model_client=42)


def test_duplicate_tool_names():
    t = Tool("same", "d", {"type": "object"}, lambda a: "x")
    with pytest.raises(ValueError, match="duplicate tool name 'same'"):
        Agent(model="m", model_client=client(), tools=[t, t])
    agent = Agent(model="m", model_client=client(), tools=[t])
    with pytest.raises(ValueError, match="duplicate"):
        agent.add_tools(Tool("same", "d", {"type": "object"}, lambda a: "y"))


def test_bad_tools():
    with pytest.raises(ValueError, match="tool name"):
        Tool("has space", "d", {"type": "object"}, lambda a: 1)
    with pytest.raises(ValueError, match="input_schema"):
        Tool("ok", "d", {"type": "string"}, lambda a: 1)
    with pytest.raises(ValueError, match="handler"):
        Tool("ok", "d", {"type": "object"}, "not callable")
    with pytest.raises(ValueError, match="tools must be"):
        Agent(model="m", model_client=client(), tools=[42])


def test_submit_output_reserved_only_with_output_schema():
    t = Tool("submit_output", "mine", {"type": "object"}, lambda a: 1)
    Agent(model="m", model_client=client(), tools=[t])  # fine without output_schema
    with pytest.raises(ValueError, match="submit_output"):
        create_agent(model="m", model_client=client(), tools=[t],
                     output_schema={"type": "object"})
    agent = create_agent(model="m", model_client=client(), output_schema={"type": "object"})
    with pytest.raises(ValueError, match="submit_output"):
        agent.add_tools(t)


@pytest.mark.parametrize("option,value", [("request_timeout_ms", 0), ("max_turns", 0),
                                          ("signal", "soon")])
def test_bad_query_overrides(option, value):
    agent = Agent(model="m", model_client=client())
    with pytest.raises(ValueError, match=option):
        agent.prompt("x", **{option: value})
    with pytest.raises(ValueError, match=option):
        agent.query("x", **{option: value})


def test_plain_function_accepted_as_tool():
    def shout(text: str) -> str:
        """Shout it."""
        return text.upper()

    agent = Agent(model="m", model_client=client(), tools=[shout])
    assert agent._settings.tools["shout"].description == "Shout it."


def test_decorator_with_arguments():
    @tool(name="renamed", description="Custom.")
    def f(x: int) -> int:
        return x

    assert f.name == "renamed" and f.description == "Custom."
    assert f.input_schema["properties"]["x"]["type"] == "integer"


# -- defaults and checks (SPEC 2) ------------------------------------------------------------


def test_max_tokens_default_and_option():
    agent, client = scripted(["a"])
    agent.prompt("hi")
    assert client.requests[0].max_tokens == 8192
    agent, client = scripted(["a"], max_tokens=123)
    agent.prompt("hi")
    assert client.requests[0].max_tokens == 123


def test_max_turns_default_is_50():
    @lattice.tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    agent, client = function_agent(lambda r: reply(tool_use("noop")), tools=[noop])
    result = agent.prompt("loop")
    assert result.subtype == "error_max_turns"
    assert len(client.requests) == 50
    assert result.num_turns == 50


@pytest.mark.parametrize("option,value", [
    ("max_turns", 0), ("max_turns", -1),
    ("request_timeout_ms", 0), ("request_timeout_ms", -5), ("request_timeout_ms", True),
    ("request_timeout_ms", 1.5), ("request_timeout_ms", "100"),
])
def test_bad_options_raise_value_error_naming_option_and_value(option, value):
    with pytest.raises(ValueError) as info:
        Agent(model=MODEL, model_client=ScriptedModelClient([]), **{option: value})
    assert option in str(info.value)
    assert repr(value) in str(info.value) or str(value) in str(info.value)


@pytest.mark.parametrize("auto_compact", [
    {"threshold_tokens": 0}, {"threshold_tokens": -10},
])
def test_bad_compaction_threshold_dict(auto_compact):
    with pytest.raises(ValueError, match="threshold_tokens"):
        Agent(model=MODEL, model_client=ScriptedModelClient([]), auto_compact=auto_compact)


@pytest.mark.parametrize("value", [0, -1])
def test_bad_compaction_threshold_object(value):
    with pytest.raises(ValueError, match="threshold_tokens"):
        Agent(model=MODEL, model_client=ScriptedModelClient([]),
              auto_compact=lattice.AutoCompact(threshold_tokens=value))
