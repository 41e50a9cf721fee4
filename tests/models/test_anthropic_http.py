"""AnthropicClient against a raw HTTP server on 127.0.0.1 (SPEC 6): requests, responses,
streaming, secrets, the mock server. Errors and retries: test_anthropic_http_errors.py.

``AnthropicClient`` is checked against a tiny stdlib HTTP server (raw_server.py, so every
byte on the wire is under the test's control) and against ``MockMessagesServer``.
"""

import json

import pytest
from helpers import MODEL, run, tool_use
from raw_server import (
    MESSAGE,
    SECRET,
    STOP,
    client,
    delta,
    error_json,
    message_json,
    request,
    sse,
    start,
    text_block,
)

import lattice
from lattice import (
    Agent,
    AnthropicClient,
    Tool,
)
from lattice.testing import MockMessagesServer

pytestmark = pytest.mark.usefixtures("clean_anthropic_env")


# -- AnthropicClient: request and response ---------------------------------------------------------

def test_non_streaming_request_and_response(raw):
    server = raw(message_json())
    system = [{"type": "text", "text": "be nice", "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    tools = [{"name": "t", "description": "T.", "input_schema": {"type": "object"}}]
    out = client(server, stream=False).create(request(
        system=system, messages=messages, tools=tools, max_tokens=321,
        extra={"temperature": 0.25}))
    [req] = server.requests
    assert req["method"] == "POST" and req["path"] == "/v1/messages"
    h = req["headers"]
    assert h["x-api-key"] == SECRET and h["anthropic-version"] == "2023-06-01"
    body = req["body"]
    assert body["model"] == "claude-test" and body["max_tokens"] == 321
    assert body["system"] == system and body["messages"] == messages and body["tools"] == tools
    assert body["temperature"] == 0.25
    assert not body.get("stream")
    assert out["role"] == "assistant"
    assert out["content"] == MESSAGE["content"]
    assert out["stop_reason"] == "end_turn"
    assert out["usage"] == MESSAGE["usage"]
    assert out["model"] == "claude-served" and out["provider_response_id"] == "msg_01"


def test_env_key_base_url_and_bearer_token(raw, monkeypatch):
    server = raw(message_json(), message_json(), message_json())
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    AnthropicClient(stream=False, max_retries=0).create(request())
    assert server.requests[0]["headers"]["x-api-key"] == "env-key"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok-123")
    AnthropicClient(stream=False, max_retries=0).create(request())
    h = server.requests[1]["headers"]
    assert h["authorization"] == "Bearer tok-123" and "x-api-key" not in h
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN")
    AnthropicClient(stream=False, max_retries=0, auth_token="param-tok",
                    default_headers={"x-extra": "1"}).create(request())
    h = server.requests[2]["headers"]
    assert h["authorization"] == "Bearer param-tok" and h["x-extra"] == "1"


def test_streaming_response(raw):
    events = [
        start(), {"type": "ping"},
        *text_block(0, "Hel", "lo"),
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": '{"a": '}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": '[1, 2]}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "mystery_block", "data": {"k": 1}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "mystery_delta", "x": 1}},
        {"type": "content_block_stop", "index": 2},
        {"type": "brand_new_event", "stuff": True},
        delta("tool_use", output_tokens=20),
        STOP,
    ]
    server = raw(sse(*events))
    seen = []
    out = client(server, stream=True).create(request(on_event=seen.append))
    assert server.requests[0]["body"]["stream"] is True
    assert out["content"] == [{"type": "text", "text": "Hello"},
                              {"type": "tool_use", "id": "toolu_1", "name": "calc",
                               "input": {"a": [1, 2]}},
                              {"type": "mystery_block", "data": {"k": 1}}]
    assert out["stop_reason"] == "tool_use"
    assert out["model"] == "claude-streamed" and out["provider_response_id"] == "msg_stream"
    assert out["usage"] == {"input_tokens": 10, "output_tokens": 20,
                            "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4}
    types = [e["type"] for e in seen]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert "content_block_delta" in types and "message_delta" in types


def test_streamed_usage_fields_are_replaced_not_added(raw):
    events = [start(), *text_block(0, "x"),
              delta(output_tokens=20, input_tokens=12, cache_read_input_tokens=5,
                    cache_creation_input_tokens=None),
              delta(output_tokens=25),
              STOP]
    out = client(raw(sse(*events))).create(request())
    assert out["usage"] == {"input_tokens": 12, "output_tokens": 25,
                            "cache_creation_input_tokens": 3, "cache_read_input_tokens": 5}


def test_agent_stream_events_with_the_built_in_client(raw):
    server = raw(sse(start(), *text_block(0, "a", "b"), delta(), STOP))
    agent = Agent(model=MODEL, api_key=SECRET, base_url=server.url,
                  include_partial_messages=True)
    messages = run(agent)
    kinds = [m.type for m in messages]
    assert kinds[-2:] == ["assistant", "result"] and set(kinds[:-2]) == {"stream_event"}
    assert messages[0].event["type"] == "message_start"
    assert messages[-1].result == "ab"


def test_api_key_never_in_repr(raw):
    c = AnthropicClient(api_key=SECRET, base_url="http://127.0.0.1:9")
    assert SECRET not in repr(c) and SECRET not in str(c)
    agent = Agent(model=MODEL, api_key=SECRET, base_url="http://127.0.0.1:9")
    assert SECRET not in repr(agent)
    server = raw(error_json(401, "invalid x-api-key"))
    agent = Agent(model=MODEL, model_client=client(server))
    with pytest.raises(lattice.AuthenticationError) as info:
        agent.prompt("hi")
    assert SECRET not in repr(info.value) and SECRET not in json.dumps(info.value.body)
    assert SECRET not in json.dumps(agent.get_history())


# -- MockMessagesServer -------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False])
def test_mock_server_end_to_end(stream):
    calc = Tool("calc", "C.", {"type": "object", "properties": {"n": {"type": "integer"}}},
                lambda i: str(i["n"] * 2))
    replies = [{"role": "assistant", "content": [tool_use("calc", {"n": 21}, "toolu_9")],
                "stop_reason": "tool_use"}, "the answer is 42"]
    with MockMessagesServer(replies) as mock:
        assert mock.base_url.startswith("http://127.0.0.1:")
        agent = Agent(model=MODEL, tools=[calc], model_client=AnthropicClient(
            api_key="k", base_url=mock.base_url, stream=stream, max_retries=0))
        messages = run(agent, "double 21")
        assert len(mock.requests) == 2
        assert "double 21" in json.dumps(mock.requests[0], default=str)
    assert messages[-1].result == "the answer is 42"
    for m in messages:
        if m.type == "assistant":
            assert m.provider_response_id and m.model
    history = agent.get_history()
    assert history[2]["content"][0]["tool_use_id"] == "toolu_9"
    assert "42" in json.dumps(history[2])


def test_default_client_talks_to_base_url():
    with MockMessagesServer(["hello from mock"]) as mock:
        agent = Agent(model=MODEL, api_key="k", base_url=mock.base_url)
        assert agent.prompt("hi").result == "hello from mock"
        assert len(mock.requests) == 1


def test_api_key_not_logged(raw, caplog):
    import logging

    server = raw(error_json(500, "oops", headers={"retry-after-ms": "1"}),
                 error_json(401, "bad key"))
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(lattice.AuthenticationError):
            client(server, max_retries=2).create(request())
    assert SECRET not in caplog.text


def test_thinking_deltas_and_sse_comments(raw):
    events = [": a comment line\n\n", start(), {"type": "ping"},
              {"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": ""}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "hmm "}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "ok"}},
              {"type": "content_block_delta", "index": 0,
               "delta": {"type": "signature_delta", "signature": "sig=="}},
              {"type": "content_block_stop", "index": 0},
              *text_block(1, "answer"), delta(), STOP]
    status, headers, body = sse(*events)
    out = client(raw((status, headers, body.replace("\n", "\r\n")))).create(request())
    assert out["content"] == [{"type": "thinking", "thinking": "hmm ok", "signature": "sig=="},
                              {"type": "text", "text": "answer"}]


def test_custom_session_is_used(raw):
    import requests

    class CountingSession(requests.Session):
        sent = 0

        def send(self, *args, **kwargs):
            CountingSession.sent += 1
            return super().send(*args, **kwargs)

    server = raw(message_json())
    out = client(server, stream=False, session=CountingSession()).create(request())
    assert out["provider_response_id"] == "msg_01" and CountingSession.sent == 1
