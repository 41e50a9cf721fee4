"""The loop (lattice/query/loop.py, SPEC 3): replies, turns and limits, the history a
query leaves, and odd model output."""

from __future__ import annotations

import pytest
from helpers import (
    MODEL,
    add,
    echo_tool,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_use,
)

from lattice import (
    Agent,
    APIConnectionError,
    AssistantMessage,
    ResultMessage,
    Tool,
    Usage,
    UserMessage,
)
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed


def test_a_text_reply_yields_the_assistant_message_then_a_success_result():
    agent, client = scripted([reply("Hello, ", "world", usage={"input_tokens": 5,
                                                             "output_tokens": 2})])
    messages = run(agent, "hi")
    assert [type(m) for m in messages] == [AssistantMessage, ResultMessage]
    a, r = messages
    assert a.type == "assistant" and r.type == "result"
    assert r.subtype == "success" and r.is_error is False
    assert r.result == "Hello, world"
    assert r.structured_result is None and r.error is None
    assert r.stop_reason == "end_turn"
    assert r.num_turns == 1
    assert isinstance(r.duration_ms, int) and r.duration_ms >= 0
    assert r.usage == Usage(input_tokens=5, output_tokens=2)
    history = agent.get_history()
    assert history[0] == {"role": "user", "content": "hi"}
    assert history[1]["role"] == "assistant"
    assert len(history) == 2
    assert client.requests[0].messages == [{"role": "user", "content": "hi"}]
    assert client.requests[0].model == MODEL


def test_a_tool_loop_appends_one_user_message_per_batch_in_call_order():
    agent, client = scripted([
        reply("let me add", tool_use("add", {"a": 1, "b": 2}, "t1"),
              tool_use("add", {"a": 3, "b": 4}, "t2")),
        reply("3 and 7"),
    ], tools=[add])
    messages = run(agent, "add things")
    assert [m.type for m in messages] == ["assistant", "user", "assistant", "result"]
    assert isinstance(messages[1], UserMessage)
    blocks = results_of(messages[1].message)
    assert [b["tool_use_id"] for b in blocks] == ["t1", "t2"]
    assert [result_text(b) for b in blocks] == ["3", "7"]
    assert messages[-1].result == "3 and 7" and messages[-1].num_turns == 2
    history = agent.get_history()
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[2] == messages[1].message
    assert len(client.requests) == 2
    assert client.requests[1].messages[2] == {"role": "user", "content": blocks}
    assert client.requests[0].tools == [add.definition]
    assert_well_formed(history)


def test_prompt_returns_result_and_multi_turn_keeps_history():
    agent, client = scripted(["Nice to meet you, Ada.", "Your name is Ada."])
    agent.prompt("My name is Ada.")
    result = agent.prompt("What is my name?")
    assert result.result == "Your name is Ada."
    assert [m["content"] for m in client.requests[1].messages][:2] == [
        "My name is Ada.", [{"type": "text", "text": "Nice to meet you, Ada."}]]


def test_a_prompt_may_be_content_blocks_and_anything_else_is_refused():
    blocks = [{"type": "text", "text": "look"}, {"type": "text", "text": " here"}]
    agent, client = scripted(["ok"])
    assert agent.prompt(blocks).result == "ok"
    assert agent.get_history()[0] == {"role": "user", "content": blocks}
    assert client.requests[0].messages[0] == {"role": "user", "content": blocks}
    with pytest.raises(ValueError, match="prompt"):
        agent.prompt(42)


def test_max_turns_counts_model_requests():
    looping = reply(tool_use("add", {"a": 1, "b": 1}))
    agent, client = scripted([looping] * 5, tools=[add], max_turns=3)
    result = agent.prompt("loop")
    assert result.subtype == "error_max_turns" and result.is_error
    assert result.num_turns == 3 and len(client.requests) == 3
    assert_well_formed(agent.get_history())


def test_stop_reason_and_provider_metadata():
    agent, client = scripted([reply("cut", stop_reason="max_tokens", model="served-model",
                                provider_response_id="msg_1")])
    messages = list(agent.query("x"))
    assert messages[-1].subtype == "success" and messages[-1].result == "cut"
    assert messages[-1].stop_reason == "max_tokens"
    assistant = messages[0]
    assert assistant.model == "served-model" and assistant.provider_response_id == "msg_1"
    entry = agent.get_history()[1]
    assert entry["model"] == "served-model" and entry["provider_response_id"] == "msg_1"


def test_function_model_client_text():
    agent = Agent(model="m", model_client=FunctionModelClient(lambda r: "fn says hi"))
    assert agent.prompt("x").result == "fn says hi"


def test_add_tools_during_a_query_affects_the_next_query_only():
    seen = []

    def model(request):
        seen.append(sorted(t["name"] for t in request.tools))
        if len(seen) == 1:
            return reply(tool_use("adder", id="1"))
        return "done"

    agent = Agent(model="m", model_client=FunctionModelClient(model), tools=[
        Tool("adder", "Adds a tool.", {"type": "object"},
             lambda a: agent.add_tools(echo_tool("late")) or "added")])
    agent.prompt("go")
    agent.prompt("again")
    assert seen == [["adder"], ["adder"], ["adder", "late"]]


def test_a_tool_name_that_is_not_a_string_and_a_call_without_id_are_answered():
    client = ScriptedModelClient([reply({"type": "tool_use", "name": ["x"], "input": {}},
                                        {"type": "tool_use", "id": "", "name": "echo",
                                         "input": {}}), "done"])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()])
    assert agent.prompt("go").result == "done"
    history = agent.get_history()
    assert_well_formed(history)
    ids = [u["id"] for u in history[1]["content"]]
    assert all(ids) and len(set(ids)) == 2
    unknown, ran = history[2]["content"]
    assert unknown["is_error"] and "Unknown tool" in unknown["content"]
    assert ran["content"] == "echo ran" and ran["tool_use_id"] == ids[1]


def test_a_reply_nested_too_deep_is_refused_before_it_enters_the_history():
    deep: object = "x"
    for _ in range(10_000):
        deep = [deep]
    agent = Agent(model="m", model_client=lambda r: reply(tool_use("echo", {"a": deep}, id="1")),
                  tools=[echo_tool()])
    with pytest.raises(APIConnectionError, match="nested deeper"):
        agent.prompt("go")
    assert agent.get_history() == [{"role": "user", "content": "go"}]


def test_a_malformed_function_call_is_asked_again_as_a_turn():
    # Gemini's MALFORMED_FUNCTION_CALL without a call to answer (SPEC 25a)
    bad = reply("Malformed function call: add(a=1,", stop_reason="malformed_function_call")
    agent, client = scripted([bad, reply(tool_use("add", {"a": 1, "b": 2})), reply("3")],
                             tools=[add])
    messages = list(agent.query("add"))
    assert messages[-1].subtype == "success" and messages[-1].result == "3"
    assert messages[-1].num_turns == 3
    again = client.requests[1].messages[-1]
    assert again["role"] == "user" and "malformed" in again["content"][0]["text"]
    assert_well_formed(agent.get_history())
    agent, client = scripted([bad, bad], tools=[add], max_turns=2)
    assert agent.prompt("add").subtype == "error_max_turns"
