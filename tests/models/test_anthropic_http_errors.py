"""AnthropicClient against a raw HTTP server on 127.0.0.1 (SPEC 6): status errors, retries
(waits recorded, never slept), broken streams, timeouts, cancellation.
"""

import socket
import time

import pytest
from helpers import MODEL
from raw_server import (
    SECRET,
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
    AbortSignal,
    Agent,
    AnthropicClient,
    APIConnectionError,
    RequestTimeoutError,
)

pytestmark = pytest.mark.usefixtures("clean_anthropic_env")


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


def test_signal_cancels_the_built_in_client(raw):
    server = raw(lambda handler, srv: srv.closing.wait(10))
    signal = AbortSignal.timeout(100)
    started = time.monotonic()
    r = Agent(model=MODEL, api_key=SECRET, base_url=server.url).prompt("hi", signal=signal)
    assert r.subtype == "error_abort" and time.monotonic() - started < 1.5


def test_connection_errors_are_retried(raw):
    def drop(handler, server):
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    server = raw(drop, message_json())
    out = client(server, max_retries=2, stream=False).create(request())
    assert out["provider_response_id"] == "msg_01" and len(server.requests) == 2


def test_non_json_error_body(raw):
    server = raw((502, {"content-type": "text/html"}, "<html>Bad Gateway</html>"))
    with pytest.raises(lattice.InternalServerError) as info:
        client(server).create(request())
    assert info.value.status_code == 502
