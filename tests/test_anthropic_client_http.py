"""AnthropicClient against a raw HTTP server on 127.0.0.1 (SPEC 6): the wire, errors,
retries (waits recorded, never slept), secrets, the mock server.

``AnthropicClient`` is checked against a tiny stdlib HTTP server defined here (so every
byte on the wire is under the test's control) and against ``MockMessagesServer``.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import MODEL, run, tool_use

import lattice
from lattice import (
    AbortSignal,
    Agent,
    AnthropicClient,
    APIConnectionError,
    ModelRequest,
    RequestTimeoutError,
    Tool,
)
from lattice.models.retry import RetryPolicy
from lattice.testing import MockMessagesServer

SECRET = "sk-ant-SECRET-do-not-leak-123"


# -- a raw scripted HTTP server -------------------------------------------------------------------

class RawServer:
    """Answers each POST with the next scripted (status, headers, body) or callable."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.requests = []
        self.closing = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.requests.append({"method": "POST", "path": self.path,
                                       "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": json.loads(raw)})
                item = outer.responses.pop(0) if outer.responses else message_json()
                if callable(item):
                    item(self, outer)
                    return
                status, headers, body = item
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if isinstance(body, (dict, list)):
                    body = json.dumps(body)
                data = body.encode() if isinstance(body, str) else body
                if "content-type" not in {k.lower() for k in headers}:
                    self.send_header("content-type", "application/json")
                self.send_header("connection", "close")
                if headers.get("content-type") != "text/event-stream":
                    self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()

    def close(self):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def raw():
    servers = []

    def make(*responses):
        server = RawServer(*responses)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-served",
           "content": [{"type": "text", "text": "hi there"}], "stop_reason": "end_turn",
           "stop_sequence": None,
           "usage": {"input_tokens": 10, "output_tokens": 2, "cache_creation_input_tokens": 3,
                     "cache_read_input_tokens": 4}}


def message_json(message=None, status=200, headers=None):
    return status, dict(headers or {}, **{"request-id": "req_ok"}), message or MESSAGE


def error_json(status, message, type="some_error", headers=None):
    return (status, dict(headers or {}, **{"request-id": f"req_{status}"}),
            {"type": "error", "error": {"type": type, "message": message}})


def sse(*events):
    text = "".join(f"event: {e.get('type', 'x')}\ndata: {json.dumps(e)}\n\n" if isinstance(e, dict)
                   else e for e in events)
    return 200, {"content-type": "text/event-stream", "request-id": "req_sse"}, text


def start(usage=None):
    return {"type": "message_start", "message": {
        "id": "msg_stream", "type": "message", "role": "assistant", "model": "claude-streamed",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 1,
                           "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4}}}


STOP = {"type": "message_stop"}


def text_block(index, *parts):
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}},
            *[{"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": p}} for p in parts],
            {"type": "content_block_stop", "index": index}]


def delta(stop_reason="end_turn", **usage):
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                               "stop_sequence": None},
            "usage": usage or {"output_tokens": 5}}


def request(**kw):
    kw.setdefault("model", "claude-test")
    kw.setdefault("messages", [{"role": "user", "content": "hello"}])
    return ModelRequest(**kw)


def client(server, waits=None, **kw):
    """A client of ``server``; its retry waits are recorded in ``waits``, never slept."""
    kw.setdefault("api_key", SECRET)
    sleep = (waits if waits is not None else []).append
    kw["retry_policy"] = RetryPolicy(max_retries=kw.pop("max_retries", 0), sleep=sleep)
    return AnthropicClient(base_url=server.url, **kw)


# -- ModelRequest ---------------------------------------------------------------------------------


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


# -- AnthropicClient: errors and retries -----------------------------------------------------------

@pytest.mark.parametrize("status,name", [
    (400, "BadRequestError"), (401, "AuthenticationError"), (403, "PermissionDeniedError"),
    (404, "NotFoundError"), (429, "RateLimitError"), (500, "InternalServerError"),
    (503, "InternalServerError"), (529, "OverloadedError"),
])
def test_http_errors_mapped(raw, status, name):
    server = raw(error_json(status, "the provider says no"))
    with pytest.raises(lattice.APIStatusError) as info:
        client(server, stream=False).create(request())
    err = info.value
    assert type(err) is getattr(lattice, name)
    assert err.status_code == status and err.request_id == f"req_{status}"
    assert err.body == {"type": "error", "error": {"type": "some_error",
                                                   "message": "the provider says no"}}
    assert "the provider says no" in str(err)
    assert SECRET not in str(err) and SECRET not in repr(err)


@pytest.mark.parametrize("status", [400, 413])
def test_prompt_too_long(raw, status):
    server = raw(error_json(status, "prompt is too long: 210000 tokens > 200000 maximum",
                            "invalid_request_error"))
    with pytest.raises(lattice.PromptTooLongError) as info:
        client(server).create(request())
    assert isinstance(info.value, lattice.BadRequestError) and info.value.status_code == status


def test_other_bad_request_is_not_prompt_too_long(raw):
    with pytest.raises(lattice.BadRequestError) as info:
        client(raw(error_json(400, "messages: field required"))).create(request())
    assert not isinstance(info.value, lattice.PromptTooLongError)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 529])
def test_retryable_statuses_are_retried(raw, status):
    server = raw(error_json(status, "try later", headers={"retry-after-ms": "1"}),
                 message_json())
    out = client(server, max_retries=2, stream=False).create(request())
    assert out["provider_response_id"] == "msg_01" and len(server.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_not_retried(raw, status):
    server = raw(error_json(status, "no", headers={"retry-after-ms": "1"}), message_json())
    with pytest.raises(lattice.APIStatusError):
        client(server, max_retries=2).create(request())
    assert len(server.requests) == 1


def test_x_should_retry_false_is_honoured(raw):
    server = raw(error_json(529, "busy", headers={"x-should-retry": "false",
                                                  "retry-after-ms": "1"}), message_json())
    with pytest.raises(lattice.OverloadedError):
        client(server, max_retries=2).create(request())
    assert len(server.requests) == 1


@pytest.mark.parametrize("header,value,at_least", [("retry-after-ms", "300", 0.25),
                                                   ("retry-after", "1", 0.9)])
def test_retry_after_is_honoured(raw, header, value, at_least):
    server = raw(error_json(429, "slow down", headers={header: value}), message_json())
    waits = []
    client(server, waits, max_retries=1, stream=False).create(request())
    assert len(waits) == 1 and waits[0] >= at_least
    assert len(server.requests) == 2


def test_retries_exhausted_raise_the_last_error(raw):
    server = raw(*[error_json(529, "busy", headers={"retry-after-ms": "1"})] * 3)
    with pytest.raises(lattice.OverloadedError):
        client(server, max_retries=2).create(request())
    assert len(server.requests) == 3


@pytest.mark.parametrize("error_type,name", [
    ("overloaded_error", "OverloadedError"), ("rate_limit_error", "RateLimitError"),
    ("invalid_request_error", "BadRequestError"), ("authentication_error", "AuthenticationError"),
    ("permission_error", "PermissionDeniedError"), ("not_found_error", "NotFoundError"),
])
def test_mid_stream_error_event(raw, error_type, name):
    error = {"type": "error", "error": {"type": error_type, "message": "stream went bad"}}
    server = raw(sse(start(), *text_block(0, "partial"), error), message_json())
    with pytest.raises(lattice.APIStatusError) as info:
        client(server, max_retries=2).create(request())
    assert type(info.value) is getattr(lattice, name)
    assert info.value.status_code is None
    assert "stream went bad" in str(info.value)
    assert len(server.requests) == 1  # a stream that failed after it started is not retried


@pytest.mark.parametrize("events", [
    [start(), *text_block(0, "partial")],  # cut before message_stop
    [start(), *text_block(0, "x"), delta()],  # no message_stop
    [start(), "event: content_block_start\ndata: {not json\n\n"],  # malformed
])
def test_broken_streams_raise_api_connection_error(raw, events):
    server = raw(sse(*events), message_json())
    with pytest.raises(APIConnectionError):
        client(server, max_retries=2).create(request())
    assert len(server.requests) == 1


def test_broken_stream_leaves_nothing_in_history(raw):
    server = raw(sse(start(), *text_block(0, "partial")))
    agent = Agent(model=MODEL, model_client=client(server))
    with pytest.raises(APIConnectionError):
        agent.prompt("hi")
    assert agent.get_history() == [{"role": "user", "content": "hi"}]


def test_connection_refused_is_api_connection_error():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    c = AnthropicClient(api_key=SECRET, base_url=f"http://127.0.0.1:{port}", max_retries=0)
    with pytest.raises(APIConnectionError) as info:
        c.create(request())
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)


def test_own_timeout_is_request_timeout_error_and_not_retried(raw):
    def hang(handler, server):
        server.closing.wait(10)

    server = raw(hang, hang, hang)
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        client(server, timeout_ms=200, max_retries=2).create(request())
    assert time.monotonic() - started < 3
    assert len(server.requests) == 1


def test_request_timeout_through_the_agent(raw):
    server = raw(lambda handler, srv: srv.closing.wait(10))
    agent = Agent(model=MODEL, api_key=SECRET, base_url=server.url, request_timeout_ms=200)
    started = time.monotonic()
    r = agent.prompt("hi")
    assert r.subtype == "error_timeout" and time.monotonic() - started < 3


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


def test_signal_cancels_the_built_in_client(raw):
    server = raw(lambda handler, srv: srv.closing.wait(10))
    signal = AbortSignal.timeout(100)
    started = time.monotonic()
    r = Agent(model=MODEL, api_key=SECRET, base_url=server.url).prompt("hi", signal=signal)
    assert r.subtype == "error_abort" and time.monotonic() - started < 1.5


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


def test_connection_errors_are_retried(raw):
    def drop(handler, server):
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    server = raw(drop, message_json())
    out = client(server, max_retries=2, stream=False).create(request())
    assert out["provider_response_id"] == "msg_01" and len(server.requests) == 2


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


def test_non_json_error_body(raw):
    server = raw((502, {"content-type": "text/html"}, "<html>Bad Gateway</html>"))
    with pytest.raises(lattice.InternalServerError) as info:
        client(server).create(request())
    assert info.value.status_code == 502


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
