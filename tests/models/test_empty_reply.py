"""A reply with nothing in it is an error (SPEC 21b), on every client.

A gateway (moto's Bedrock, say) answers 200 with ``{}``; a stream may end properly with
nothing in it and no stop reason. Both are ``APIConnectionError`` ("the reply had no
content"), never a ``success`` with an empty result. A reply with a stop reason and no
content (the model chose to say nothing) stays a reply.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Optional

import pytest
from endless_server import EndlessServer, http_response

from lattice import (
    Agent,
    AnthropicBedrockClient,
    AnthropicClient,
    AnthropicVertexClient,
    AzureOpenAIChatClient,
    AzureOpenAIResponsesClient,
    GeminiClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    VertexGeminiClient,
)
from lattice.errors import APIConnectionError
from lattice.models.base import ModelRequest
from lattice.testing._mock_bedrock import bedrock_frames

KEY = "k" * 20
MAKERS: Dict[str, Callable[..., Any]] = {
    "anthropic": lambda url, **o: AnthropicClient(KEY, base_url=url, **o),
    "bedrock": lambda url, **o: AnthropicBedrockClient(
        region="us-east-1", access_key_id="AKID", secret_access_key=KEY, base_url=url, **o),
    "vertex": lambda url, **o: AnthropicVertexClient(project_id="p", region="us-east5",
                                                     access_token=KEY, base_url=url, **o),
    "chat": lambda url, **o: OpenAIChatClient(KEY, base_url=url + "/v1", **o),
    "azure-chat": lambda url, **o: AzureOpenAIChatClient(
        endpoint=url, deployment="d", api_version="v", api_key=KEY, **o),
    "responses": lambda url, **o: OpenAIResponsesClient(api_key=KEY, base_url=url, **o),
    "azure-responses": lambda url, **o: AzureOpenAIResponsesClient(endpoint=url,
                                                                   api_key=KEY, **o),
    "gemini": lambda url, **o: GeminiClient(api_key=KEY, base_url=url, **o),
    "vertex-gemini": lambda url, **o: VertexGeminiClient(
        project_id="p", region="us-east5", access_token=KEY, base_url=url, **o),
}


def request() -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def _always(body: bytes) -> Callable[[bytes], Optional[bytes]]:
    return lambda raw: body


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_a_gateways_empty_object_is_an_error(name: str) -> None:
    with EndlessServer("json", _always(http_response({}))) as server:
        client = MAKERS[name](server.url, stream=False, max_retries=0)
        with pytest.raises(APIConnectionError, match="the reply had no content"):
            client.create(request())


def _sse(*events: Dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


_START = {"type": "message_start", "message": {"id": "msg_1", "model": "m", "content": [],
                                               "usage": {"input_tokens": 1}}}
STREAMS = {
    "anthropic": ("text/event-stream", _sse(_START, {"type": "message_stop"})),
    "vertex": ("text/event-stream", _sse(_START, {"type": "message_stop"})),
    "bedrock": ("application/vnd.amazon.eventstream",
                bedrock_frames([_START, {"type": "message_stop"}])),
    "chat": ("text/event-stream", _sse({"id": "c", "choices": [
        {"index": 0, "delta": {"role": "assistant"}}]}) + b"data: [DONE]\n\n"),
    "responses": ("text/event-stream", _sse(
        {"type": "response.created", "response": {"id": "r", "model": "m"}},
        {"type": "response.completed", "response": {"id": "r", "model": "m"}})),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_an_empty_stream_without_a_stop_reason_is_an_error(name: str) -> None:
    kind, body = STREAMS[name]
    answer = http_response(body, kind=kind)
    with EndlessServer("json", _always(answer)) as server:
        client = MAKERS[name](server.url, max_retries=0)
        with pytest.raises(APIConnectionError, match="the reply had no content"):
            client.create(request())


def test_a_reply_with_a_stop_reason_and_no_content_stays_a_reply() -> None:
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [], "stop_reason": "end_turn", "usage": {}}
    with EndlessServer("json", _always(http_response(body))) as server:
        reply = MAKERS["anthropic"](server.url, stream=False).create(request())
    assert reply["content"] == [] and reply["stop_reason"] == "end_turn"


def test_prompt_does_not_answer_success_for_an_empty_object() -> None:
    with EndlessServer("json", _always(http_response({}))) as server:
        client = MAKERS["bedrock"](server.url, stream=False, max_retries=0)
        with pytest.raises(APIConnectionError, match="the reply had no content"):
            Agent(model_client=client, model="m").prompt("hi")
