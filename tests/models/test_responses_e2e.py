"""OpenAIResponsesClient end to end against MockMessagesServer's /v1/responses, and the
official ``openai`` SDK (test-only) reading the mock's replies."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

import lattice
from lattice import Agent, StreamEvent
from lattice.errors import (
    APIConnectionError,
    InternalServerError,
    PromptTooLongError,
    RateLimitError,
    RequestTimeoutError,
)
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.models.openai import OpenAIChatClient
from lattice.models.responses import OpenAIResponsesClient
from lattice.testing import MockMessagesServer

KEY = "sk-test-0123456789abcdef"


@lattice.tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def _tool_turn(call_id: str, thought: str) -> Dict[str, Any]:
    return {"content": [{"type": "thinking", "thinking": thought},
                        {"type": "text", "text": "Let me add."},
                        {"type": "tool_use", "id": call_id, "name": "add",
                         "input": {"a": 1, "b": 2}}]}


@pytest.mark.parametrize("stream", [False, True])
def test_agent_tool_loop_round_trips_reasoning(stream: bool) -> None:
    script = [_tool_turn("call_1", "Adding is easy."), _tool_turn("call_2", "Once more."),
              {"content": [{"type": "thinking", "thinking": "Done."},
                           {"type": "text", "text": "It is 3."}]}]
    with MockMessagesServer(script) as server:
        client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, stream=stream)
        events: List[Any] = []
        agent = Agent(model="gpt-5", model_client=client, tools=[add], system="Be brief.",
                      include_partial_messages=True)
        for item in agent.query("What is 1+2?"):
            events.append(item)
        result = events[-1]
        assert result.subtype == "success" and result.result == "It is 3."
        first, second, third = server.requests
        assert first["instructions"] == "Be brief." and first["store"] is False
        assert first["include"] == ["reasoning.encrypted_content"]
        assert first["tools"][0]["strict"] is False and first["tools"][0]["type"] == "function"
        # the reasoning item of the first reply goes back, before its message and call
        kinds = [i.get("type", "message") for i in second["input"]]
        assert kinds == ["message", "reasoning", "message", "function_call",
                         "function_call_output"]
        reasoning = second["input"][1]
        assert reasoning["summary"][0]["text"] == "Adding is easy."
        assert reasoning["encrypted_content"].startswith("gAAAA")
        assert second["input"][3]["call_id"] == "call_1"
        assert second["input"][4] == {"type": "function_call_output", "call_id": "call_1",
                                      "output": "3"}
        assert [i.get("type", "message") for i in third["input"]].count("reasoning") == 2
        history = agent.get_history()
        assert all("openai_items" in m for m in history if m["role"] == "assistant")
        assert history[1]["content"][0] == {"type": "thinking", "thinking": "Adding is easy."}
        if stream:
            kinds = {e.event["type"] for e in events if isinstance(e, StreamEvent)}
            assert {"response.created", "response.output_text.delta",
                    "response.function_call_arguments.delta",
                    "response.completed"} <= kinds


def test_reasoning_items_never_reach_another_provider() -> None:
    with MockMessagesServer([_tool_turn("call_1", "Hmm."), "It is 3.", "Again 3.",
                             "Chat 3."]) as server:
        agent = Agent(model="gpt-5", model_client=OpenAIResponsesClient(
            api_key=KEY, base_url=server.base_url + "/v1"), tools=[add])
        agent.prompt("1+2?")
        history = agent.get_history()
        assert any("openai_items" in m for m in history)
        for client in (AnthropicClient(KEY, server.base_url),
                       OpenAIChatClient(KEY, server.base_url + "/v1")):
            request = ModelRequest(model="m", messages=[
                {"role": m["role"], "content": m["content"],
                 **({"openai_items": m["openai_items"]} if "openai_items" in m else {})}
                for m in history] + [{"role": "user", "content": "again"}])
            client.create(request)
        sent = [json.dumps(body) for body in server.requests[2:]]
        assert len(sent) == 2 and not any("openai_items" in s or "gAAAA" in s for s in sent)


def test_max_output_tokens_incomplete_is_max_tokens_and_usage() -> None:
    reply = {"content": [{"type": "thinking", "thinking": "x" * 40},
                         {"type": "text", "text": "Partial"}],
             "stop_reason": "max_tokens",
             "usage": {"input_tokens": 10, "cache_read_input_tokens": 30, "output_tokens": 5}}
    for stream in (False, True):
        with MockMessagesServer([reply]) as server:
            client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, stream=stream)
            result = client.create(ModelRequest(model="gpt-5", max_tokens=20, messages=[
                {"role": "user", "content": "long story"}]))
        assert result["stop_reason"] == "max_tokens"
        assert result["usage"] == {"input_tokens": 10, "output_tokens": 15,
                                   "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 30, "reasoning_tokens": 10}
        assert server.requests[0]["max_output_tokens"] == 20


def test_refusal_and_output_format() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    with MockMessagesServer([{"content": "I can't help with that.", "stop_reason": "refusal"},
                             '{"city": "Paris"}']) as server:
        client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, stream=False)
        refused = client.create(ModelRequest(model="gpt-5", messages=[
            {"role": "user", "content": "bad"}]))
        assert refused["stop_reason"] == "refusal"
        assert refused["content"] == [{"type": "text", "text": "I can't help with that."}]
        agent = Agent(model="gpt-5", model_client=client, output_format=schema)
        result = agent.prompt("Where?")
        assert result.structured_result == {"city": "Paris"}
        form = server.requests[1]["text"]["format"]
        assert form == {"type": "json_schema", "name": "output", "schema": schema,
                        "strict": True}


@pytest.mark.parametrize("stream", [False, True])
def test_errors(stream: bool) -> None:
    faults = [MockMessagesServer.error(400, "This model's maximum context length is 8192 "
                                       "tokens.", type="context_length_exceeded"),
              MockMessagesServer.error(429, "slow down")]
    wanted: List[type] = [PromptTooLongError, RateLimitError]
    if stream:  # stream faults: an error event by its code (else a connection error), a cut
        faults += [MockMessagesServer.stream_error("overloaded_error", "Overloaded"),
                   MockMessagesServer.stream_error("rate_limit_error", "too fast"),
                   MockMessagesServer.stream_error("mystery", "who knows"),
                   MockMessagesServer.cut_stream(3)]
        wanted += [InternalServerError, RateLimitError, APIConnectionError,
                   APIConnectionError]
    with MockMessagesServer(faults) as server:
        client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, stream=stream,
                                       max_retries=0)
        request = ModelRequest(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
        for cls in wanted:
            with pytest.raises(cls) as raised:
                client.create(request)
            assert type(raised.value) is cls
            assert KEY not in str(raised.value)


def test_response_failed_event_names_its_error() -> None:
    failed = {"type": "response.failed", "response": {
        "id": "resp_1", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "The server had an error."}}}
    text = f"event: response.failed\ndata: {json.dumps(failed)}\n\n"
    with MockMessagesServer([MockMessagesServer.raw_sse(text)]) as server:
        client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, max_retries=0)
        with pytest.raises(InternalServerError, match="The server had an error"):
            client.create(ModelRequest(model="gpt-5", messages=[
                {"role": "user", "content": "hi"}]))


def test_base_url_with_or_without_v1() -> None:
    with MockMessagesServer(["a", "b"]) as server:
        for base in (server.base_url, server.base_url + "/v1/"):
            client = OpenAIResponsesClient(api_key=KEY, base_url=base)
            client.create(ModelRequest(model="gpt-5", messages=[
                {"role": "user", "content": "hi"}]))
        assert len(server.requests) == 2


# -- the official SDK reads the mock's replies ---------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_accepts_the_mock(stream: bool) -> None:
    openai = pytest.importorskip("openai", reason="the openai SDK is not installed (pip install openai)")
    script = [_tool_turn("call_9", "Thinking it over.")]
    with MockMessagesServer(script) as server:
        sdk = openai.OpenAI(api_key=KEY, base_url=server.base_url + "/v1", max_retries=0)
        tools = [{"type": "function", "name": "add", "description": "Add.", "strict": False,
                  "parameters": add.input_schema}]
        items: List[Any] = [{"role": "user", "content": "1+2?"}]
        kwargs = dict(model="gpt-5", tools=tools, store=False,
                      include=["reasoning.encrypted_content"])
        if stream:
            with sdk.responses.stream(input=items, **kwargs) as events:
                seen = [event.type for event in events]
                response = events.get_final_response()
            assert seen[0] == "response.created" and seen[-1] == "response.completed"
            assert "response.reasoning_summary_text.delta" in seen
            server.add(_tool_turn("call_9", "Thinking it over."))
            created = list(sdk.responses.create(input=items, stream=True, **kwargs))
            assert created[-1].type == "response.completed"
            assert created[-1].response.output[2].call_id == "call_9"
        else:
            response = sdk.responses.create(input=items, **kwargs)
        kinds = [item.type for item in response.output]
        assert kinds == ["reasoning", "message", "function_call"]
        call = response.output[2]
        assert (call.call_id, call.name, json.loads(call.arguments)) == \
            ("call_9", "add", {"a": 1, "b": 2})
        assert response.output_text == "Let me add."
        assert response.usage.output_tokens_details.reasoning_tokens > 0
        items += [item.model_dump(exclude_none=True) for item in response.output]
        items.append({"type": "function_call_output", "call_id": "call_9", "output": "3"})
        server.add("Three.")
        again = sdk.responses.create(input=items, **kwargs)  # the mock checks the pairing
        assert again.output_text == "Three." and again.status == "completed"


def test_reasoning_survives_a_store(tmp_path: Any) -> None:
    path = str(tmp_path / "conversation.jsonl")
    with MockMessagesServer([_tool_turn("call_1", "Stored thought."), "3.", "Still 3."]) as s:
        def agent() -> Agent:
            return Agent(model="gpt-5", tools=[add],
                         model_client=OpenAIResponsesClient(api_key=KEY, base_url=s.base_url),
                         history_store=lattice.create_jsonl_history_store(path))

        agent().prompt("1+2?")
        assert agent().prompt("Sure?").result == "Still 3."  # a new Agent, loaded from disk
        resumed = s.requests[-1]["input"]
        reasoning = [i for i in resumed if i.get("type") == "reasoning"]
        assert [r["summary"][0]["text"] for r in reasoning] == ["Stored thought."]


def test_a_reply_cut_while_reasoning_does_not_break_the_next_request() -> None:
    cut = {"content": [{"type": "thinking", "thinking": "Long thought..."}],
           "stop_reason": "max_tokens"}
    with MockMessagesServer([cut, "Short answer."]) as server:  # strict: it would refuse
        agent = Agent(model="gpt-5", model_client=OpenAIResponsesClient(
            api_key=KEY, base_url=server.base_url))
        first = agent.prompt("Think hard.")
        assert first.stop_reason == "max_tokens"
        assert agent.prompt("Just answer.").result == "Short answer."
        kinds = [i.get("type", "message") for i in server.requests[1]["input"]]
        assert kinds == ["message", "message"]  # the dangling reasoning item is left out


def test_parallel_calls_and_a_deadline() -> None:
    two = {"content": [
        {"type": "tool_use", "id": "call_a", "name": "add", "input": {"a": 1, "b": 1}},
        {"type": "tool_use", "id": "call_b", "name": "add", "input": {"a": 2, "b": 2}}]}
    with MockMessagesServer([two, "2 and 4.", MockMessagesServer.hang()]) as server:
        client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, max_retries=0)
        agent = Agent(model="gpt-5", model_client=client, tools=[add])
        assert agent.prompt("1+1 and 2+2?").result == "2 and 4."
        sent = server.requests[1]["input"]
        assert [(i["type"], i["call_id"]) for i in sent if "call_id" in i] == [
            ("function_call", "call_a"), ("function_call", "call_b"),
            ("function_call_output", "call_a"), ("function_call_output", "call_b")]
        with pytest.raises(RequestTimeoutError):
            client.create(ModelRequest(model="gpt-5", timeout_ms=300, messages=[
                {"role": "user", "content": "hang"}]))


def test_store_true_sends_reasoning_back_by_id() -> None:
    with MockMessagesServer([_tool_turn("call_1", "Kept by OpenAI."), "3."]) as server:
        client = OpenAIResponsesClient(api_key=KEY, base_url=server.base_url, store=True)
        Agent(model="gpt-5", model_client=client, tools=[add]).prompt("1+2?")
        first, second = server.requests
        assert first["store"] is True and "include" not in first
        reasoning = [i for i in second["input"] if i.get("type") == "reasoning"]
        assert reasoning and "encrypted_content" not in reasoning[0]  # null: left out
