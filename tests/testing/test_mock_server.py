"""AnthropicClient end to end against the real local MockMessagesServer."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Dict, Iterator, List

import pytest
import requests

from lattice.cancellation import AbortController
from lattice.errors import (
    AbortError,
    APIConnectionError,
    AuthenticationError,
    OverloadedError,
    RateLimitError,
    RequestTimeoutError,
)
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.models.retry import RetryPolicy
from lattice.models.wire import message_events
from lattice.testing.mock_server import MockMessagesServer

KEY = "sk-ant-mock-0123456789"
VERSION = {"anthropic-version": "2023-06-01"}

TOOL_REPLY = {"content": [
    {"type": "text", "text": "Let me look that up for you."},
    {"type": "tool_use", "id": "toolu_1", "name": "lookup",
     "input": {"query": "weather in Paris", "days": [1, 2, 3], "deep": {"a": None}}},
]}
THINKING_REPLY = {"content": [
    {"type": "thinking", "thinking": "The user wants a greeting. Keep it short.",
     "signature": "EqQBCkgIARABGAIiQL2/sig=="},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
    {"type": "text", "text": "Hello!", "citations": [{"type": "char_location", "cited_text": "x"}]},
], "stop_reason": "end_turn", "usage": {"cache_read_input_tokens": 7}}


@pytest.fixture
def server() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as srv:
        yield srv


def request(**kwargs: Any) -> ModelRequest:
    kwargs.setdefault("model", "claude-test")
    kwargs.setdefault("messages", [{"role": "user", "content": "Hello"}])
    return ModelRequest(**kwargs)


def fast_retries(**kwargs: Any) -> RetryPolicy:
    return RetryPolicy(initial_delay=0.001, max_delay=0.002, **kwargs)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("reply", ["Hello there, world!", TOOL_REPLY, THINKING_REPLY])
def test_round_trip_keeps_content_exactly(server: MockMessagesServer, stream: bool,
                                          reply: Any) -> None:
    server.add(reply)
    got = AnthropicClient(KEY, server.base_url, stream=stream).create(request())
    expected = [{"type": "text", "text": reply}] if isinstance(reply, str) else reply["content"]
    assert got["content"] == expected
    assert got["stop_reason"] == ("tool_use" if reply is TOOL_REPLY else "end_turn")
    assert got["model"] == "claude-test" and got["provider_response_id"].startswith("msg_mock_")
    body_size = len(json.dumps(server.requests[0], separators=(",", ":")))
    assert got["usage"]["input_tokens"] == pytest.approx(body_size // 4, abs=2)
    assert got["usage"]["output_tokens"] > 0
    assert server.requests[0].get("stream", False) is stream
    assert server.request_headers[0]["x-api-key"] == KEY


def test_on_event_receives_every_event(server: MockMessagesServer) -> None:
    server.add(TOOL_REPLY)
    seen: List[Dict[str, Any]] = []
    AnthropicClient(KEY, server.base_url).create(request(on_event=seen.append))
    types = [e["type"] for e in seen]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert "ping" in types
    deltas = [e["delta"]["type"] for e in seen if e["type"] == "content_block_delta"]
    assert deltas.count("text_delta") >= 2 and deltas.count("input_json_delta") >= 2
    message = {"id": "m", "model": "x", "content": TOOL_REPLY["content"], "stop_reason": "tool_use",
               "stop_sequence": None, "usage": {"output_tokens": 1}}
    assert len(seen) == len(message_events(message))


def test_script_runs_out_to_default_text_and_callables_see_the_body(
    server: MockMessagesServer,
) -> None:
    server.add(lambda body: f"you said {body['messages'][-1]['content']}")
    c = AnthropicClient(KEY, server.base_url)
    assert c.create(request())["content"][0]["text"] == "you said Hello"
    assert c.create(request())["content"][0]["text"] == MockMessagesServer.DEFAULT_TEXT
    assert len(server.requests) == 2


def test_stream_cut_before_message_stop_is_a_connection_error(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.cut_stream(after_events=4, reply="a long enough reply"))
    seen: List[Dict[str, Any]] = []
    with pytest.raises(APIConnectionError):
        AnthropicClient(KEY, server.base_url).create(request(on_event=seen.append))
    assert len(seen) == 4
    assert len(server.requests) == 1  # a stream that started is never retried


def test_stream_ending_cleanly_but_early_is_a_connection_error(server: MockMessagesServer) -> None:
    events = message_events({"id": "m", "model": "x", "content": [{"type": "text", "text": "hi"}],
                            "stop_reason": "end_turn", "stop_sequence": None, "usage": {}})
    text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events[:-1])
    server.add(MockMessagesServer.raw_sse(text))
    with pytest.raises(APIConnectionError, match="message_stop"):
        AnthropicClient(KEY, server.base_url).create(request())


@pytest.mark.parametrize(("kind", "cls"), [("overloaded_error", OverloadedError),
                                           ("rate_limit_error", RateLimitError)])
def test_mid_stream_error_event(server: MockMessagesServer, kind: str, cls: type) -> None:
    server.add(MockMessagesServer.stream_error(kind, "Overloaded", after_events=3), "after")
    c = AnthropicClient(KEY, server.base_url)
    with pytest.raises(cls, match="Overloaded") as info:
        c.create(request())
    assert info.value.status_code is None
    assert info.value.request_id and info.value.request_id.startswith("req_mock_")
    assert c.create(request())["content"][0]["text"] == "after"  # the pool is still healthy
    assert len(server.requests) == 2


def test_malformed_data_is_a_connection_error(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.raw_sse('event: message_start\ndata: {"type": "message_st\n\n'))
    with pytest.raises(APIConnectionError, match="malformed"):
        AnthropicClient(KEY, server.base_url).create(request())


def test_raw_sse_with_crlf_in_tiny_chunks(server: MockMessagesServer) -> None:
    events = message_events({"id": "m", "model": "x", "content": [{"type": "text", "text": "héllo"}],
                            "stop_reason": "end_turn", "stop_sequence": None, "usage": {}})
    text = "".join(f": comment\r\nevent: {e['type']}\r\ndata:{json.dumps(e)}\r\n\r\n"
                   for e in events)
    server.add(MockMessagesServer.raw_sse(text.encode("utf-8"), chunk_size=3))
    assert AnthropicClient(KEY, server.base_url).create(request())["content"] == [
        {"type": "text", "text": "héllo"}]


def test_close_delimited_sse_is_read_as_it_arrives(server: MockMessagesServer) -> None:
    events = message_events({"id": "m", "model": "x", "content": [{"type": "text", "text": "ok"}],
                             "stop_reason": "end_turn", "stop_sequence": None, "usage": {}})
    text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    server.add(MockMessagesServer.raw_sse(text, chunk_size=50, chunked=False), "after")
    c = AnthropicClient(KEY, server.base_url)
    assert c.create(request())["content"] == [{"type": "text", "text": "ok"}]
    assert c.create(request())["content"][0]["text"] == "after"


def test_http_errors_and_retries_against_the_server(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.error(529, "busy", headers={"retry-after-ms": "1"}),
               {"fault": "error", "status": 500, "message": "oops"}, "finally")
    c = AnthropicClient(KEY, server.base_url, retry_policy=fast_retries())
    assert c.create(request())["content"][0]["text"] == "finally"
    assert len(server.requests) == 3
    server.add(MockMessagesServer.error(401, "bad key"))
    with pytest.raises(AuthenticationError, match="bad key") as info:
        c.create(request())
    assert info.value.status_code == 401 and info.value.request_id.startswith("req_mock_")


def test_hanging_server_times_out(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.hang())
    c = AnthropicClient(KEY, server.base_url, retry_policy=fast_retries())
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        c.create(request(timeout_ms=200))
    elapsed = time.monotonic() - started
    assert 0.15 < elapsed < 5.0
    assert len(server.requests) == 1  # our own timeout is never retried


def test_trickling_stream_ends_at_the_deadline(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.trickle(interval=0.02))
    seen: List[Dict[str, Any]] = []
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError):
        AnthropicClient(KEY, server.base_url, timeout_ms=300).create(
            request(on_event=seen.append))
    assert 0.25 < time.monotonic() - started < 5.0
    assert seen[0]["type"] == "message_start" and len(seen) > 3


@pytest.mark.parametrize("fault", [MockMessagesServer.hang(),
                                   MockMessagesServer.hang(after_events=3)])
def test_abort_while_server_hangs_returns_promptly(server: MockMessagesServer, fault: Any) -> None:
    server.add(fault, "next")
    c = AnthropicClient(KEY, server.base_url)
    controller = AbortController()
    reason = AbortError("user pressed stop")
    timer = threading.Timer(0.1, controller.abort, args=(reason,))
    timer.start()
    started = time.monotonic()
    with pytest.raises(AbortError) as info:
        c.create(request(signal=controller.signal))
    assert time.monotonic() - started < 2.0
    assert info.value is reason
    assert c.create(request())["content"][0]["text"] == "next"  # the client still works


def test_threads_share_one_client(server: MockMessagesServer) -> None:
    server.add(*[lambda body: f"echo {body['messages'][0]['content']}"] * 160)
    c = AnthropicClient(KEY, server.base_url)
    errors: List[BaseException] = []
    mismatches: List[str] = []

    def worker(n: int) -> None:
        try:
            for i in range(20):
                tag = f"t{n}-{i}"
                reply = c.create(request(messages=[{"role": "user", "content": tag}]))
                if reply["content"][0]["text"] != f"echo {tag}":
                    mismatches.append(tag)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and not mismatches
    assert len(server.requests) == 160
    assert c._get_session() is c._session  # one shared session


def test_forced_stream_mode_and_unknown_route() -> None:
    with MockMessagesServer(["json please"], stream=False) as srv:
        reply = AnthropicClient(KEY, srv.base_url, stream=True).create(request())
        assert reply["content"][0]["text"] == "json please"  # a JSON answer to a stream request
        response = requests.post(srv.base_url + "/v1/other", json={})
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found_error"


def test_close_ends_hanging_replies_and_is_idempotent() -> None:
    srv = MockMessagesServer([MockMessagesServer.hang()]).start()
    url = srv.base_url
    result: List[Any] = []
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    thread = threading.Thread(target=lambda: result.append(_swallow(lambda: requests.post(
        url + "/v1/messages", json=body, headers=VERSION, timeout=10))))
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.requests and time.monotonic() < deadline:
        time.sleep(0.005)
    assert srv.requests, result  # the request was taken (not refused)
    srv.close()
    thread.join(5)
    assert not thread.is_alive()
    srv.close()
    assert "not started" in repr(srv)


def _swallow(fn: Any) -> Any:
    try:
        return fn()
    except requests.RequestException as exc:
        return exc


def test_user_session_abort_mid_stream_and_timeout(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.hang(after_events=3), MockMessagesServer.hang(), "fine")
    c = AnthropicClient(KEY, server.base_url, session=requests.Session())
    controller = AbortController()
    threading.Timer(0.1, controller.abort).start()
    started = time.monotonic()
    with pytest.raises(AbortError):
        c.create(request(signal=controller.signal))
    assert time.monotonic() - started < 2.0  # cut through the response's connection
    with pytest.raises(RequestTimeoutError):
        c.create(request(timeout_ms=200))  # before headers: requests' own read timeout
    assert c.create(request())["content"][0]["text"] == "fine"


def test_deadlines_firing_as_replies_finish_never_hit_other_calls(
    server: MockMessagesServer,
) -> None:
    # Calls whose deadline lands right when their reply completes run beside normal
    # calls on one shared pool: a late cut must never reach a connection in other use.
    def reply(body: Dict[str, Any]) -> Any:
        if body["messages"][0]["content"] == "slow":
            return MockMessagesServer.delay(0.03, "slow ok")
        return "fast ok"

    server.add(*[reply] * 200)
    c = AnthropicClient(KEY, server.base_url)
    failures: List[BaseException] = []
    outcomes: List[str] = []

    def normal() -> None:
        for _ in range(25):
            try:
                c.create(request())
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)

    def borderline() -> None:
        for i in range(15):
            try:
                c.create(request(messages=[{"role": "user", "content": "slow"}],
                                 timeout_ms=30 + (i % 3) * 2))
                outcomes.append("ok")
            except RequestTimeoutError:
                outcomes.append("timeout")

    threads = [threading.Thread(target=normal) for _ in range(3)]
    threads += [threading.Thread(target=borderline) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures
    assert len(outcomes) == 30


@pytest.mark.parametrize("bad", [42, {"content": 5}, {"fault": "explode"},
                                 {"fault": "error", "status": 200}])
def test_bad_scripted_replies_are_refused_up_front(bad: Any) -> None:
    with pytest.raises(ValueError, match="MockMessagesServer"):
        MockMessagesServer([bad])


def test_callable_returning_garbage_is_a_500_the_client_can_read() -> None:
    from lattice import AnthropicClient, InternalServerError
    from lattice.models.base import ModelRequest

    with MockMessagesServer([lambda body: 42, "not used"]) as server:
        client = AnthropicClient(api_key="k", base_url=server.base_url)
        with pytest.raises(InternalServerError):
            client.create(ModelRequest(model="m", messages=[{"role": "user", "content": "x"}]))
        assert len(server.requests) == 1  # x-should-retry: false, no script entry used up
