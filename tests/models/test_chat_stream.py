"""Chat Completions streaming through OpenAIChatClient (``chat_stream.py``): fragments
joined by index, repeated ids and names, null arguments, the usage chunk, ``[DONE]``,
cut streams, invalid data and error objects (SPEC 11 and 16)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import responses
from helpers import chat_chunk as chunk
from helpers import chat_sent as sent
from helpers import chat_sse as sse
from helpers import chat_stream_reply as stream_reply

from lattice.errors import (
    APIConnectionError,
    BadRequestError,
    OverloadedError,
    PromptTooLongError,
    RateLimitError,
)


@responses.activate
def test_stream_joins_fragments_by_index_and_reads_the_usage_chunk() -> None:
    events: List[Dict[str, Any]] = []
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning": "Let me "}), chunk({"reasoning": "think."}),
        chunk({"content": "Two "}), chunk({"content": "calls."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                               "function": {"name": "get", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_y", "type": "function",
                               "function": {"name": "put", "arguments": None}}]}),
        chunk({"tool_calls": [{"index": 0, "id": "call_x", "function": {
            "name": "get", "arguments": '{"k":'}}]}),  # id and name repeated
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"v": 2}'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "a"}'}}]}),
        chunk({}, "tool_calls"),
        {"id": "chatcmpl-s", "object": "chat.completion.chunk", "choices": [],
         "usage": {"prompt_tokens": 50, "completion_tokens": 9,
                   "prompt_tokens_details": {"cached_tokens": 20}}},
    ]
    reply = stream_reply(sse(*chunks), on_event=events.append)
    assert reply["content"] == [
        {"type": "thinking", "thinking": "Let me think."},
        {"type": "text", "text": "Two calls."},
        {"type": "tool_use", "id": "call_x", "name": "get", "input": {"k": "a"}},
        {"type": "tool_use", "id": "call_y", "name": "put", "input": {"v": 2}}]
    assert reply["stop_reason"] == "tool_use" and reply["model"] == "gpt-s"
    assert reply["usage"]["input_tokens"] == 30 and reply["usage"]["cache_read_input_tokens"] == 20
    assert events == chunks  # each chunk dict exactly as received
    assert sent()["stream"] is True


@responses.activate
def test_stream_done_without_finish_reason_is_complete() -> None:
    reply = stream_reply(sse(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {
        "name": "f"}}]})))
    assert reply["stop_reason"] == "tool_use" and reply["content"][0]["input"] == {}


@responses.activate
def test_stream_with_finish_reason_but_no_done_is_complete() -> None:
    reply = stream_reply(sse(chunk({"content": "hi"}), chunk({}, "length"), done=False))
    assert reply["stop_reason"] == "max_tokens" and reply["content"][0]["text"] == "hi"


@responses.activate
def test_stream_cut_before_done_and_finish_reason_raises() -> None:
    with pytest.raises(APIConnectionError, match=r"\[DONE\]"):
        stream_reply(sse(chunk({"content": "partial"}), done=False))


@responses.activate
def test_stream_invalid_json_raises() -> None:
    with pytest.raises(APIConnectionError, match="malformed"):
        stream_reply(sse(chunk({"content": "a"}), "{not json"))


@pytest.mark.parametrize("error, cls", [
    ({"message": "Token limit reached", "code": 400}, BadRequestError),
    ({"message": "slow down", "type": "rate_limit_error"}, RateLimitError),
    ({"message": "busy", "status_code": 529}, OverloadedError),
    ({"message": "This model's maximum context length is 8192 tokens", "code": 400},
     PromptTooLongError),
])
@responses.activate
def test_stream_error_object_raises_its_class(error: Dict[str, Any], cls: type) -> None:
    with pytest.raises(cls, match=error["message"][:10]):
        stream_reply(sse(chunk({"content": "a"}), {"error": error}))


@responses.activate
def test_stream_error_event_raises() -> None:
    body = (sse(chunk({"content": "a"}), done=False) + "event: error\ndata: " +
            json.dumps({"error": {"message": "bad tool", "type": "invalid_request_error",
                                  "status_code": 400}}) + "\n\n")
    with pytest.raises(BadRequestError, match="bad tool"):
        stream_reply(body)
