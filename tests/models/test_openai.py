"""OpenAIChatClient over mocked HTTP (``responses``): each translation rule both ways,
streaming and not, each error mapping, retries, options and secrets (SPEC 11)."""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Optional

import pytest
import responses
from helpers import OPENAI_KEY as KEY
from helpers import OPENAI_URL as URL
from helpers import chat_client as client
from helpers import chat_request as request
from helpers import chat_sent as sent

from lattice.errors import (
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    PromptTooLongError,
    RateLimitError,
)
from lattice.models.anthropic import AnthropicClient
from lattice.models.openai import OpenAIChatClient
from lattice.models.retry import RetryPolicy


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def completion(message: Dict[str, Any], finish: Optional[str] = "stop",
               usage: Any = None) -> Dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-served",
            "choices": [{"index": 0, "message": dict({"role": "assistant"}, **message),
                         "finish_reason": finish}],
            "usage": usage if usage is not None else {"prompt_tokens": 10,
                                                      "completion_tokens": 2}}


# -- request translation -------------------------------------------------------------------

IMAGE64 = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                       "data": "QUJD"}}
IMAGE_URL = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
HISTORY = [
    {"role": "user", "content": [{"type": "text", "text": "Look:",
                                  "cache_control": {"type": "ephemeral"}}, IMAGE64, IMAGE_URL]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_a", "name": "get", "input": {"k": 1}},
        {"type": "tool_use", "id": "call_b", "name": "put", "input": {}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_a", "content": "value"},
        {"type": "tool_result", "tool_use_id": "call_b", "is_error": True,
         "content": [{"type": "text", "text": "disk full"}]},
        {"type": "text", "text": "Also this."}]},
    {"role": "assistant", "content": "Plain text reply."},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_c", "is_error": True,
         "content": "Error: already said"},
        {"type": "tool_result", "tool_use_id": "call_d",
         "content": [{"type": "text", "text": "chart"}, IMAGE64]}]},
]


@responses.activate
def test_request_translation() -> None:
    responses.add(responses.POST, URL, json=completion({"content": "ok"}))
    tools = [{"name": "get", "description": "Get it.", "input_schema": {"type": "object"},
              "cache_control": {"type": "ephemeral"}},
             {"name": "put", "input_schema": {"type": "object"}, "strict": True}]
    client().create(request(system=[{"type": "text", "text": "Be brief."},
                                    {"type": "text", "text": "Be kind."}],
                            messages=HISTORY, tools=tools, max_tokens=77))
    body = sent()
    data_url = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, data_url,
                                     {"type": "image_url",
                                      "image_url": {"url": "https://x.test/a.png"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get", "arguments": '{"k": 1}'}},
            {"id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "value"},
        {"role": "tool", "tool_call_id": "call_b", "content": "Error: disk full"},
        {"role": "user", "content": "Also this."},
        {"role": "assistant", "content": "Plain text reply."},
        {"role": "tool", "tool_call_id": "call_c", "content": "Error: already said"},
        {"role": "tool", "tool_call_id": "call_d", "content": "chart"},
        {"role": "user", "content": [{"type": "text", "text": "(images from tool call call_d)"},
                                     data_url]},
    ]
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get", "description": "Get it.",
                                          "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "put", "parameters": {"type": "object"},
                                          "strict": True}}]
    assert body["max_completion_tokens"] == 77 and "stream" not in body
    assert "cache_control" not in json.dumps(body) and "thinking" not in json.dumps(body)


@responses.activate
def test_assistant_with_only_tool_calls_sends_null_content_and_string_input_as_given() -> None:
    responses.add(responses.POST, URL, json=completion({"content": "ok"}))
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": [
                   {"type": "tool_use", "id": "c1", "name": "f", "input": "not json"}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                             "content": "bad"}]}]
    client().create(request(messages=history))
    assistant = sent()["messages"][1]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"]["arguments"] == "not json"


@responses.activate
def test_unsendable_block_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'document'"):
        client().create(request(messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "data": "x"}}]}]))


@pytest.mark.parametrize("stream", [False, True])
@responses.activate
def test_stream_flags_output_format_max_tokens_field_and_extra(stream: bool) -> None:
    responses.add(responses.POST, URL, json=completion({"content": "{}"}))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    c = client(max_tokens_field="max_tokens")
    c.stream = stream
    c.create(request(output_format=schema, extra={"temperature": 0, "stream": False}))
    body = sent()
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": schema, "strict": True}}
    assert body["max_tokens"] == 8192 and "max_completion_tokens" not in body
    assert body["temperature"] == 0 and body["stream"] is False  # extra wins
    if stream:
        assert body["stream_options"] == {"include_usage": True}


@responses.activate
def test_anthropic_sends_output_config_and_strict_tools_as_given() -> None:
    url = "https://api.anthropic.com/v1/messages"
    responses.add(responses.POST, url, json={
        "id": "m", "type": "message", "role": "assistant", "model": "c",
        "content": [{"type": "text", "text": "{}"}], "stop_reason": "end_turn", "usage": {}})
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"},
              "strict": True}]
    AnthropicClient(KEY, stream=False).create(request(output_format={"type": "object"},
                                                      tools=tools))
    body = sent()
    assert body["output_config"] == {"format": {"type": "json_schema",
                                                "schema": {"type": "object"}}}
    assert body["tools"] == tools


@responses.activate
def test_headers_default_query_and_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://example.azure.test/openai/v1/")
    url = "https://example.azure.test/openai/v1/chat/completions?api-version=2024-10-21"
    responses.add(responses.POST, url, json=completion({"content": "ok"}))
    c = OpenAIChatClient(default_query={"api-version": "2024-10-21"},
                         default_headers={"api-key": "azure-key-123456"}, stream=False)
    c.create(request())
    headers = responses.calls[0].request.headers
    assert headers["authorization"] == f"Bearer {KEY}" and headers["api-key"] == "azure-key-123456"
    assert responses.calls[0].request.url == url


@responses.activate
def test_no_key_sends_no_authorization_header() -> None:
    responses.add(responses.POST, "http://localhost:11434/v1/chat/completions",
                  json=completion({"content": "ok"}))
    OpenAIChatClient(base_url="http://localhost:11434/v1", stream=False).create(request())
    assert "authorization" not in responses.calls[0].request.headers


@pytest.mark.parametrize("options, name", [
    ({"max_tokens_field": "tokens"}, "max_tokens_field"), ({"default_query": {"a": None}},
                                                           "default_query"),
    ({"default_query": "a=1"}, "default_query"), ({"max_retries": -1}, "max_retries"),
    ({"stream": "yes"}, "stream"), ({"timeout_ms": 0}, "timeout_ms"),
    ({"base_url": "ftp://x"}, "base_url"), ({"api_key": ""}, "api_key"),
])
def test_bad_options_name_the_option(options: Dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        OpenAIChatClient(**options)


# -- reply translation ---------------------------------------------------------------------


@pytest.mark.parametrize("finish, calls, stop", [
    ("stop", False, "end_turn"), ("length", False, "max_tokens"), ("tool_calls", True, "tool_use"),
    ("function_call", True, "tool_use"), ("content_filter", False, "refusal"),
    ("eos", False, "eos"), (None, True, "tool_use"), ("", False, "end_turn"),
])
@responses.activate
def test_finish_reason_mapping(finish: Optional[str], calls: bool, stop: str) -> None:
    message: Dict[str, Any] = {"content": "x"}
    if calls:
        message["tool_calls"] = [{"id": "c", "type": "function",
                                  "function": {"name": "f", "arguments": "{}"}}]
    responses.add(responses.POST, URL, json=completion(message, finish))
    assert client().create(request())["stop_reason"] == stop


@responses.activate
def test_reply_translation() -> None:
    responses.add(responses.POST, URL, json=completion({
        "content": "Let me look.", "reasoning_content": "thinking...",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}},
            {"id": "", "type": "function", "function": {"name": "b", "arguments": "[1, 2]"}},
            {"type": "function", "function": {"name": "c", "arguments": "{broken"}},
            {"id": "call_4", "type": "function", "function": {"name": "d"}}]},
        "tool_calls", {"prompt_tokens": 100, "completion_tokens": 7,
                       "prompt_tokens_details": {"cached_tokens": 60}}))
    reply = client().create(request())
    content = reply["content"]
    assert content[0] == {"type": "thinking", "thinking": "thinking..."}
    assert content[1] == {"type": "text", "text": "Let me look."}
    uses = content[2:]
    assert [(u["name"], u["input"]) for u in uses] == [
        ("a", {"x": 1}), ("b", "[1, 2]"), ("c", "{broken"), ("d", {})]
    assert uses[0]["id"] == "call_1" and uses[3]["id"] == "call_4"
    assert uses[1]["id"].startswith("call_lattice_") and uses[1]["id"] != uses[2]["id"]
    assert reply["stop_reason"] == "tool_use"
    assert reply["usage"] == {"input_tokens": 40, "output_tokens": 7,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 60}
    assert reply["provider_response_id"] == "chatcmpl-1" and reply["model"] == "gpt-served"


@responses.activate
def test_absent_usage_is_zeros_and_refusal_is_kept() -> None:
    body = completion({"content": None, "refusal": "I can't help with that."}, usage={})
    del body["usage"]
    responses.add(responses.POST, URL, json=body)
    reply = client().create(request())
    assert reply["usage"] == dict.fromkeys(reply["usage"], 0)
    assert reply["content"] == [{"type": "text", "text": "I can't help with that."}]
    assert reply["stop_reason"] == "refusal"


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"object": "list"}'])
@responses.activate
def test_reply_that_is_not_a_completion_is_a_clear_error(body: bytes) -> None:
    responses.add(responses.POST, URL, body=body, content_type="application/json")
    with pytest.raises(APIConnectionError):
        client().create(request())


# -- errors and retries --------------------------------------------------------------------


@pytest.mark.parametrize("status, cls", [
    (400, BadRequestError), (401, AuthenticationError), (403, PermissionDeniedError),
    (404, NotFoundError), (429, RateLimitError), (500, InternalServerError),
    (503, InternalServerError), (418, APIStatusError)])
@responses.activate
def test_status_errors_map_with_request_id(status: int, cls: type) -> None:
    body = {"error": {"message": f"failure {status}", "type": "x", "code": None}}
    responses.add(responses.POST, URL, status=status, json=body,
                  headers={"x-request-id": "req_abc"})
    with pytest.raises(cls) as info:
        client(max_retries=0).create(request())
    assert type(info.value) is cls
    assert info.value.message.startswith(f"failure {status}")
    assert info.value.request_id == "req_abc" and info.value.body == body


@pytest.mark.parametrize("error", [
    {"message": "Please reduce the length of the messages.", "code": "context_length_exceeded"},
    {"message": "This model's maximum context length is 128000 tokens. However, you requested "
                "130000 tokens.", "code": None},
    {"message": "litellm.ContextWindowExceededError: litellm.BadRequestError: ..."},
    {"message": "Input is too long for requested model."},
    {"message": "prompt has too many tokens"},
    {"message": "The input exceeds the context window of this model"},
])
@responses.activate
def test_context_length_errors_are_prompt_too_long(error: Dict[str, Any]) -> None:
    responses.add(responses.POST, URL, status=400, json={"error": error})
    with pytest.raises(PromptTooLongError):
        client(max_retries=0).create(request())


@responses.activate
def test_plain_400_is_not_prompt_too_long() -> None:
    responses.add(responses.POST, URL, status=400,
                  json={"error": {"message": "Invalid 'messages[3]'.", "code": "invalid_value"}})
    with pytest.raises(BadRequestError) as info:
        client(max_retries=0).create(request())
    assert not isinstance(info.value, PromptTooLongError)


@responses.activate
def test_retries_429_and_5xx_honouring_retry_after_but_not_400() -> None:
    sleeps: List[float] = []
    policy = RetryPolicy(max_retries=3, sleep=sleeps.append, random=lambda: 0.0)
    responses.add(responses.POST, URL, status=429, json={"error": {"message": "slow"}},
                  headers={"retry-after-ms": "1500"})
    responses.add(responses.POST, URL, status=502, body="bad gateway")
    responses.add(responses.POST, URL, json=completion({"content": "ok"}))
    reply = OpenAIChatClient(KEY, stream=False, retry_policy=policy).create(request())
    assert reply["content"][0]["text"] == "ok" and sleeps == [1.5, 1.0]
    responses.add(responses.POST, URL, status=400, json={"error": {"message": "no"}})
    with pytest.raises(BadRequestError):
        OpenAIChatClient(KEY, stream=False, retry_policy=policy).create(request())
    assert len(responses.calls) == 4


@responses.activate
def test_key_never_in_repr_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    echo = f"Incorrect API key provided: {KEY}"
    responses.add(responses.POST, URL, status=500, json={"error": {"message": echo}})
    responses.add(responses.POST, URL, status=401, json={"error": {"message": echo}})
    c = client(max_retries=1)
    assert KEY not in repr(c)
    with caplog.at_level(logging.DEBUG, logger="lattice"):
        with pytest.raises(AuthenticationError) as info:
            c.create(request())
    assert KEY not in str(info.value) and KEY not in json.dumps(info.value.body)
    assert "retry" in caplog.text and KEY not in caplog.text


def test_translation_cache_reuses_unchanged_history_dicts_only() -> None:
    from lattice.models.chat_wire import Translations, chat_messages

    cache = Translations()
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f",
                                                  "input": {"a": 1}}]}]
    first = chat_messages(None, history, cache)
    again = chat_messages(None, history, cache)
    assert again == first and again[1] is first[1]  # translated once
    history[1] = {"role": "assistant", "content": "replaced by a hook"}
    assert chat_messages(None, history, cache)[1] == {"role": "assistant",
                                                      "content": "replaced by a hook"}
    assert chat_messages(None, history) == chat_messages(None, history, cache)


def test_translation_memo_translates_only_the_new_tail_and_follows_any_change() -> None:
    from lattice.models import chat_wire
    from lattice.models.chat_wire import Translations, chat_messages

    cache = Translations()
    history: List[Dict[str, Any]] = [{"role": "user", "content": f"m{i}"} for i in range(3)]
    assert chat_messages("sys", history, cache) == chat_messages("sys", history)
    calls: List[Any] = []
    original = chat_wire._message
    chat_wire._message = lambda m: calls.append(m) or original(m)  # type: ignore[assignment]
    try:
        history = history + [{"role": "assistant", "content": "a"}]
        out = chat_messages("sys", history, cache)
        assert calls == [history[-1]]  # the prefix came from the last request
        assert out == chat_messages("sys", history)
        # A different system, a dropped first message, a shorter list: still right.
        for system, messages in (("other", history), ("sys", history[1:]),
                                 ("sys", history[:2]), (None, history)):
            assert chat_messages(system, messages, cache) == chat_messages(system, messages)
    finally:
        chat_wire._message = original  # type: ignore[assignment]


def test_translated_tools_are_reused_while_the_definitions_are_the_same() -> None:
    from lattice.models.chat_wire import Translations, cached_tools, chat_tools

    cache = Translations()
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    first = cached_tools(list(tools), cache, chat_tools)
    assert cached_tools(list(tools), cache, chat_tools) is first and first == chat_tools(tools)
    other = tools + [{"name": "g", "input_schema": {"type": "object"}}]
    assert cached_tools(other, cache, chat_tools) == chat_tools(other)
