"""Agent (lattice/agent.py): construction, tools, history access (SPEC 2, 4)."""

import pytest
from helpers import (
    MODEL,
    echo_tool,
    reply,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    Agent,
    Tool,
    create_agent,
)
from lattice.testing import ScriptedModelClient


def test_create_agent_takes_the_same_options():
    client = ScriptedModelClient(["hello"])
    agent = create_agent(model=MODEL, model_client=client, system="be brief", max_turns=3)
    assert isinstance(agent, Agent)
    assert agent.prompt("hi").result == "hello"
    assert client.requests[0].system == "be brief"


def test_model_client_may_be_a_plain_callable_and_model_optional():
    seen = []

    def client(request):
        seen.append(request)
        return {"role": "assistant", "content": [{"type": "text", "text": "yo"}],
                "stop_reason": "end_turn"}

    agent = Agent(model_client=client)
    assert agent.prompt("hi").result == "yo"
    assert len(seen) == 1


def test_duplicate_tool_names_rejected():
    def h(_input):
        return "x"

    t1 = Tool("same", "one", {"type": "object"}, h)
    t2 = Tool("same", "two", {"type": "object"}, h)
    with pytest.raises(ValueError, match="same"):
        Agent(model=MODEL, model_client=ScriptedModelClient([]), tools=[t1, t2])
    agent = Agent(model=MODEL, model_client=ScriptedModelClient([]), tools=[t1])
    with pytest.raises(ValueError, match="same"):
        agent.add_tools(t2)


def test_tools_option_and_add_tools_reach_the_request():
    @lattice.tool
    def alpha(x: int) -> int:
        """Alpha tool."""
        return x

    beta = Tool("beta", "Beta tool.", {"type": "object", "properties": {}}, lambda i: "b")
    agent, client = scripted(["a", "b"], tools=(t for t in [alpha]))
    agent.prompt("hi")
    assert [t["name"] for t in client.requests[0].tools] == ["alpha"]
    agent.add_tools(beta)
    agent.prompt("again")
    names = [t["name"] for t in client.requests[1].tools]
    assert sorted(names) == ["alpha", "beta"]
    for definition in client.requests[1].tools:
        assert set(definition) == {"name", "description", "input_schema"}


def test_multi_turn_sends_the_whole_history():
    agent, client = scripted(["My name is noted.", "Ada"])
    agent.prompt("My name is Ada.")
    assert agent.prompt("What is my name?").result == "Ada"
    assert [m["content"] if isinstance(m["content"], str) else "A"
            for m in client.requests[1].messages] == ["My name is Ada.", "A", "What is my name?"]


def test_get_history_is_a_deep_copy():
    agent, _ = scripted([reply("x", tool_use("t", {"k": [1]}, "t1")), "y"])
    agent.prompt("hi")
    copy = agent.get_history()
    copy[1]["content"][1]["input"]["k"].append(2)
    copy.append({"role": "user", "content": "junk"})
    fresh = agent.get_history()
    assert fresh[1]["content"][1]["input"] == {"k": [1]}
    assert len(fresh) == 4


def test_model_required_without_a_client():
    with pytest.raises(ValueError, match="model"):
        Agent(api_key="k")


def test_get_history_is_deep_copy_and_replace_history():
    agent, client = scripted(["a", "b"])
    agent.prompt("one")
    history = agent.get_history()
    history[0]["content"] = "mutated"
    assert agent.get_history()[0]["content"] == "one"
    agent.replace_history([{"role": "user", "content": "seed"},
                           {"role": "assistant", "content": "ok"}])
    agent.prompt("two")
    assert [m["content"] for m in client.requests[1].messages][::2] == ["seed", "two"]


def test_tools_given_as_one_object_or_a_string_get_a_clear_error():
    for bad in (echo_tool(), "echo", {"echo": 1}):
        with pytest.raises(ValueError, match="tools must be a list"):
            Agent(model="m", model_client=ScriptedModelClient([]), tools=bad)
