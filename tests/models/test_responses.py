"""Responses codec without a server: request bodies, replies, streamed events, options."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import responses

from lattice.errors import APIConnectionError, BadRequestError, PromptTooLongError
from lattice.models.base import ModelRequest
from lattice.models.chat_wire import Translations
from lattice.models.responses import OpenAIResponsesClient
from lattice.models.responses_stream import parse_responses_stream
from lattice.models.responses_wire import reply_from_response, responses_body

KEY = "sk-unit-0123456789abcdef"
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBOR"}}


def _body(**fields: Any) -> Dict[str, Any]:
    fields.setdefault("messages", [{"role": "user", "content": "hi"}])
    data, _ = responses_body(ModelRequest(model="gpt-5", **fields), stream=False, store=False)
    return json.loads(data)  # type: ignore[no-any-return]


def test_request_shape() -> None:
    body = _body(system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
                 max_tokens=100, tools=[
                     {"name": "f", "description": "F.", "input_schema": {"type": "object"}},
                     {"name": "g", "input_schema": {"type": "object"}, "strict": True}],
                 extra={"reasoning": {"effort": "low"}})
    assert body["instructions"] == "A\n\nB" and body["max_output_tokens"] == 100
    assert body["tools"] == [
        {"type": "function", "name": "f", "description": "F.",
         "parameters": {"type": "object"}, "strict": False},
        {"type": "function", "name": "g", "parameters": {"type": "object"}, "strict": True}]
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "low"} and "stream" not in body
    logprobs = _body(extra={"include": ["message.output_text.logprobs"]})["include"]
    assert logprobs == ["message.output_text.logprobs", "reasoning.encrypted_content"]
    data, streaming = responses_body(ModelRequest(model="m", messages=[]), stream=True,
                                     store=True)
    stored = json.loads(data)
    assert streaming and stored["store"] is True and "include" not in stored
    with pytest.raises(ValueError, match="model"):
        responses_body(ModelRequest(model=None, messages=[]), stream=False, store=False)


def test_history_as_input_items() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "look", "cache_control": {}},
                                     IMAGE]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"},
                                          {"type": "text", "text": "calling"},
                                          {"type": "tool_use", "id": "c1", "name": "f",
                                           "input": {"q": "é"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "boom", "is_error": True},
            {"type": "text", "text": "and?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c2", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c2",
                                      "content": [{"type": "text", "text": "pic"}, IMAGE]}]},
    ]
    items = _body(messages=messages)["input"]
    assert items == [
        {"role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR",
             "detail": "auto"}]},
        {"role": "assistant", "content": "calling"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"q": "é"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Error: boom"},
        {"role": "user", "content": [{"type": "input_text", "text": "and?"}]},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": [
            {"type": "input_text", "text": "pic"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR",
             "detail": "auto"}]},
    ]
    with pytest.raises(ValueError, match="'audio'"):
        _body(messages=[{"role": "user", "content": [{"type": "audio"}]}])


def test_citations_are_kept_with_the_reply_and_sent_back_with_its_text() -> None:
    note = {"type": "url_citation", "start_index": 0, "end_index": 5, "url":
            "https://example.com/a", "title": "A"}
    reply = reply_from_response({"id": "resp_1", "model": "gpt-5", "status": "completed",
                                 "output": [
        {"id": "ws_1", "type": "web_search_call", "status": "completed"},
        {"id": "msg_1", "type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Paris is the capital.",
             "annotations": [note]}]}]})
    assert reply["content"] == [{"type": "text", "text": "Paris is the capital."}]
    assert reply["openai_items"][1] == {"id": "msg_1", "type": "message",
                                        "annotations": [note]}
    history = [{"role": "user", "content": "capital?"},
               {"role": "assistant", "content": reply["content"],
                "openai_items": reply["openai_items"]}]
    sent = json.loads(responses_body(ModelRequest(model="m", messages=history),
                                     stream=False, store=False)[0])["input"]
    assert sent[2] == {"id": "msg_1", "type": "message", "role": "assistant",
                       "status": "completed", "content": [
                           {"type": "output_text", "text": "Paris is the capital.",
                            "annotations": [note]}]}
    plain = reply_from_response({"id": "resp_2", "status": "completed", "output": [
        {"id": "msg_2", "type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Hi", "annotations": []}]}]})
    assert "openai_items" not in plain  # nothing to carry: the text alone goes back


def test_kept_items_go_back_in_order_and_the_cache_reuses_translations() -> None:
    reply = reply_from_response({"id": "resp_1", "model": "gpt-5", "status": "completed",
                                 "output": [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text",
                                                         "text": "think"}],
         "encrypted_content": "enc"},
        {"id": "msg_1", "type": "message", "role": "assistant", "phase": "commentary",
         "content": [{"type": "output_text", "text": "Hi"}]},
        {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f",
         "arguments": "{\"a\":1}", "status": "completed"}]})
    assert reply["content"] == [{"type": "thinking", "thinking": "think"},
                                {"type": "text", "text": "Hi"},
                                {"type": "tool_use", "id": "call_1", "name": "f",
                                 "input": {"a": 1}}]
    assert reply["stop_reason"] == "tool_use"
    history: List[Dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": reply["content"], "openai_items":
         reply["openai_items"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                      "content": "1"}]}]
    cache = Translations()
    first = json.loads(responses_body(ModelRequest(model="m", messages=history),
                                      stream=False, store=False, cache=cache)[0])["input"]
    assert first[1:4] == [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text",
                                                         "text": "think"}],
         "encrypted_content": "enc"},
        {"type": "message", "id": "msg_1", "phase": "commentary", "role": "assistant",
         "status": "completed", "content": [{"type": "output_text", "text": "Hi",
                                             "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
         "arguments": "{\"a\": 1}", "status": "completed"}]  # every field as sent
    longer = history + [{"role": "assistant", "content": "done"}]
    second = json.loads(responses_body(ModelRequest(model="m", messages=longer),
                                       stream=False, store=False, cache=cache)[0])["input"]
    assert second[:-1] == first and second[-1] == {"role": "assistant", "content": "done"}


@pytest.mark.parametrize("body, error", [
    ({"status": "failed", "error": {"code": "server_error", "message": "oops"}}, "Internal"),
    ({"error": {"code": "context_length_exceeded", "message": "too long"}}, "PromptTooLong"),
    ({"status": "completed"}, "APIConnection"),
    ([1], "APIConnection"),
])
def test_bad_or_failed_replies(body: Any, error: str) -> None:
    with pytest.raises(Exception) as raised:
        reply_from_response(body)
    assert type(raised.value).__name__.startswith(error)


def _sse(events: List[Dict[str, Any]]) -> List[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def test_stream_assembles_items_when_the_final_event_has_no_output() -> None:
    seen: List[Dict[str, Any]] = []
    events = [
        {"type": "response.created", "response": {"id": "resp_9", "model": "m"}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"type": "message", "id": "msg", "role": "assistant", "content": []}},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "lo"},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"},
        {"type": "response.something.new"},
        {"type": "response.completed", "response": {"status": "completed", "output": []}},
    ]
    reply = parse_responses_stream(_sse(events), seen.append)
    assert [b["type"] for b in reply["content"]] == ["text", "tool_use"]
    assert reply["content"][0]["text"] == "Hello" and reply["provider_response_id"] == "resp_9"
    assert len(seen) == len(events)
    with pytest.raises(APIConnectionError, match="ended before response.completed"):
        parse_responses_stream(_sse(events[:-1]))
    with pytest.raises(BadRequestError):
        parse_responses_stream(_sse(events[:2] + [
            {"type": "error", "code": "invalid_prompt", "message": "no"}]))


@responses.activate
def test_http_errors_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    url = "https://api.openai.com/v1/responses"
    responses.add(responses.POST, url, status=400, headers={"x-request-id": "req_7"}, json={
        "error": {"message": "Your input exceeds the context window of this model.",
                  "type": "invalid_request_error", "code": "context_length_exceeded"}})
    client = OpenAIResponsesClient(stream=False)
    with pytest.raises(PromptTooLongError) as raised:
        client.create(ModelRequest(model="gpt-5", messages=[{"role": "user", "content": "x"}]))
    assert raised.value.request_id == "req_7" and raised.value.status_code == 400
    assert responses.calls[0].request.headers["authorization"] == f"Bearer {KEY}"
    azure_like = OpenAIResponsesClient(base_url="https://r.openai.azure.com/openai/v1",
                                       default_headers={"api-key": "azure-key-123456"})
    assert azure_like._headers()[0].get("authorization") is None  # no OpenAI key to Azure
    tokens = OpenAIResponsesClient(token_provider=lambda: "tok-0123456789")
    assert tokens._headers()[0]["authorization"] == "Bearer tok-0123456789"
    assert KEY not in repr(client) and "store=False" in repr(client)
    with pytest.raises(ValueError, match="store"):
        OpenAIResponsesClient(store="no")  # type: ignore[arg-type]


def test_malformed_replies_name_the_field() -> None:
    good = {"id": "r", "model": "m", "status": "completed", "output": []}
    with pytest.raises(APIConnectionError, match="model"):
        reply_from_response(dict(good, model=5))
    with pytest.raises(APIConnectionError, match="output item"):
        reply_from_response(dict(good, output=["x"]))
    with pytest.raises(APIConnectionError, match="without a name"):
        reply_from_response(dict(good, output=[{"type": "function_call", "call_id": "c"}]))
    deep: Any = {}
    for _ in range(120):
        deep = {"x": deep}
    with pytest.raises(APIConnectionError, match="nested deeper"):
        reply_from_response(dict(good, output=[{"type": "web_search_call", "action": deep}]))
