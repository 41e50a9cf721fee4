"""Bad options fail at construction (or at query) with a ValueError naming them."""
import pytest

from lattice import Agent, Tool, create_agent, tool
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
