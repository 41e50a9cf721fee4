"""End to end over real HTTP: Agent + OpenAIChatClient + MockMessagesServer's Chat
Completions face on 127.0.0.1 (tools, end_turn, submit_output, overflow recovery,
abort, timeouts, a mixed conversation), and the mock's chat rendering itself."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List

import pytest
from helpers import lookup

from lattice import (
    AbortController,
    Agent,
    APIConnectionError,
    AutoCompact,
    ModelRequest,
    OpenAIChatClient,
    OverloadedError,
    PromptTooLongError,
    ToolResult,
    tool,
)
from lattice.testing import MockMessagesServer, assert_well_formed

PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                   "data": "iVBORw0KGgo="}}


@tool
def explode(reason: str) -> str:
    """Always fails.

    Args:
        reason: Why.
    """
    raise RuntimeError(f"exploded: {reason}")


@tool
def snapshot() -> list:  # type: ignore[type-arg]
    """Return a picture."""
    return [{"type": "text", "text": "here it is"}, PNG]


@tool
def finish(answer: str) -> ToolResult:
    """End the turn with an answer.

    Args:
        answer: The answer.
    """
    return ToolResult(answer, end_turn=True)


def call(name: str, **input: Any) -> Dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": input}


def chat_client(server: MockMessagesServer, **kwargs: Any) -> OpenAIChatClient:
    return OpenAIChatClient("sk-mock-key-123456789", base_url=server.base_url + "/v1",
                            **kwargs)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_tool_loop_both_base_urls_streaming_and_not(stream: bool, suffix: str) -> None:
    script = [{"content": [{"type": "text", "text": "checking"}, call("lookup", key="k")]},
              "the value is known"]
    with MockMessagesServer(script) as server:
        client = OpenAIChatClient(base_url=server.base_url + suffix, stream=stream)
        agent = Agent(model="gpt-mock", model_client=client, tools=[lookup],
                      include_partial_messages=stream)
        messages = list(agent.query("go"))
        result = messages[-1]
        assert result.subtype == "success" and result.result == "the value is known"
        assert result.usage.input_tokens > 0 and result.num_turns == 2
        second = server.requests[1]
        assert second["messages"][-1]["role"] == "tool"
        assert second["messages"][-1]["content"] == "value of k"
        assert ("stream_options" in second) is stream
    history = agent.get_history()
    assert_well_formed(history)
    assert history[1]["provider_response_id"].startswith("chatcmpl-")
    if stream:
        events = [m.event for m in messages if m.type == "stream_event"]
        assert events and all(e["object"] == "chat.completion.chunk" for e in events)


def test_end_turn_tool_ends_the_query() -> None:
    with MockMessagesServer([{"content": [call("finish", answer="42")]}]) as server:
        agent = Agent(model="m", model_client=chat_client(server), tools=[finish])
        result = agent.prompt("answer")
        assert result.subtype == "success" and result.result == "42"
        assert len(server.requests) == 1


@dataclass
class Weather:
    city: str
    celsius: int


def test_submit_output_with_output_schema() -> None:
    script = [{"content": [call("submit_output", city="Oslo")]},  # invalid: no celsius
              {"content": [call("submit_output", city="Oslo", celsius=3)]}]
    with MockMessagesServer(script) as server:
        agent = Agent(model="m", model_client=chat_client(server), output_schema=Weather)
        result = agent.prompt("weather?")
        assert result.subtype == "success" and result.structured_result == Weather("Oslo", 3)
        tools = server.requests[0]["tools"]
        assert tools[0]["function"]["name"] == "submit_output"
        feedback = server.requests[1]["messages"][-1]
        assert feedback["role"] == "tool" and feedback["content"].startswith("Error")


def test_output_format_is_sent_as_response_format() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    with MockMessagesServer(['{"city": "Oslo"}']) as server:
        reply = chat_client(server).create(ModelRequest(
            model="m", messages=[{"role": "user", "content": "x"}], output_format=schema))
        assert reply["content"] == [{"type": "text", "text": '{"city": "Oslo"}'}]
        sent = server.requests[0]["response_format"]
        assert sent == {"type": "json_schema",
                        "json_schema": {"name": "output", "schema": schema, "strict": True}}


def test_overflow_recovery_on_context_length_exceeded() -> None:
    too_long = MockMessagesServer.error(
        400, "This model's maximum context length is 128000 tokens.",
        type="context_length_exceeded")
    tool_turn = {"content": [{"type": "text", "text": "checking"}, call("lookup", key="k")]}
    script = [tool_turn, tool_turn, too_long, "SUMMARY: looked k up twice", "all done"]
    with MockMessagesServer(script) as server:
        agent = Agent(model="m", model_client=chat_client(server), tools=[lookup],
                      auto_compact=AutoCompact(threshold_tokens=10**9, keep_recent_messages=2))
        messages = list(agent.query("start"))
        assert messages[-1].subtype == "success" and messages[-1].result == "all done"
        assert [m.type for m in messages].count("system") == 1
        retried = server.requests[4]["messages"]
        assert any("SUMMARY" in str(m["content"]) for m in retried)
    assert_well_formed(agent.get_history())


def test_overflow_without_auto_compact_raises_prompt_too_long() -> None:
    with MockMessagesServer([MockMessagesServer.error(
            400, "too long", type="context_length_exceeded")]) as server:
        agent = Agent(model="m", model_client=chat_client(server))
        with pytest.raises(PromptTooLongError):
            agent.prompt("x")


def test_abort_while_server_hangs() -> None:
    with MockMessagesServer([MockMessagesServer.hang(after_events=2)]) as server:
        agent = Agent(model="m", model_client=chat_client(server))
        controller = AbortController()
        threading.Timer(0.2, controller.abort).start()
        started = time.monotonic()
        result = agent.prompt("x", signal=controller.signal)
        assert result.subtype == "error_abort" and time.monotonic() - started < 3


@pytest.mark.parametrize("fault", [MockMessagesServer.hang(), MockMessagesServer.trickle(0.02)])
def test_request_timeout_while_server_hangs_or_trickles(fault: Any) -> None:
    with MockMessagesServer([fault]) as server:
        agent = Agent(model="m", model_client=chat_client(server), request_timeout_ms=300)
        started = time.monotonic()
        result = agent.prompt("x")
        assert result.subtype == "error_timeout" and time.monotonic() - started < 3
    assert agent.get_history()[-1]["role"] == "user"  # nothing partial entered


def test_mixed_conversation_text_tools_errors_images_and_back() -> None:
    script = [
        {"content": [{"type": "text", "text": "Three calls."}, call("lookup", key="a"),
                     call("explode", reason="test"), call("snapshot")]},
        "I saw the picture and the error.",
        {"content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Again."}]},
    ]
    with MockMessagesServer(script) as server:
        agent = Agent(model="m", model_client=chat_client(server, stream=True), system="Be terse.",
                      tools=[lookup, explode, snapshot])
        first = agent.prompt([{"type": "text", "text": "Look at this:"}, PNG])
        assert first.result == "I saw the picture and the error."
        second = agent.prompt("and again?")
        assert second.result == "Again."
        sent = server.requests[1]["messages"]
        assert sent[0] == {"role": "system", "content": "Be terse."}
        assert sent[1]["content"][1] == {"type": "image_url", "image_url": {
            "url": "data:image/png;base64,iVBORw0KGgo="}}
        assert sent[2]["role"] == "assistant" and len(sent[2]["tool_calls"]) == 3
        tools = [m for m in sent if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tools] == [c["id"] for c in sent[2]["tool_calls"]]
        assert tools[0]["content"] == "value of a"
        assert tools[1]["content"].startswith("Error") and "exploded: test" in tools[1]["content"]
        assert tools[2]["content"] == "here it is"
        assert sent[-1]["role"] == "user" and sent[-1]["content"][1]["type"] == "image_url"
        third = server.requests[2]["messages"]
        assert third[-1] == {"role": "user", "content": "and again?"}
    history = agent.get_history()
    assert_well_formed(history)
    assert history[-1]["content"][0] == {"type": "thinking", "thinking": "hmm"}


def test_mock_chat_faults_map_to_the_right_errors() -> None:
    script = [MockMessagesServer.cut_stream(after_events=2),
              MockMessagesServer.stream_error("overloaded_error", "Overloaded"),
              MockMessagesServer.error(529, "busy", headers={"x-should-retry": "false"})]
    with MockMessagesServer(script) as server:
        client = chat_client(server, max_retries=0)
        request = ModelRequest(model="m", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(APIConnectionError):
            client.create(request)
        with pytest.raises(OverloadedError, match="Overloaded"):
            client.create(request)
        with pytest.raises(OverloadedError, match="busy") as info:
            client.create(request)
        assert info.value.request_id and info.value.request_id.startswith("req_mock_")
        assert len(server.requests) == 3
        assert server.request_headers[0]["authorization"] == "Bearer sk-mock-key-123456789"


def test_one_server_speaks_both_apis_from_one_script() -> None:
    from lattice import AnthropicClient

    with MockMessagesServer(["to chat", "to messages"]) as server:
        request = ModelRequest(model="m", messages=[{"role": "user", "content": "x"}])
        replies: List[Any] = [chat_client(server).create(request),
                              AnthropicClient("k", base_url=server.base_url).create(request)]
        assert [r["content"][0]["text"] for r in replies] == ["to chat", "to messages"]
        assert "max_completion_tokens" in server.requests[0]
        assert "max_tokens" in server.requests[1]
