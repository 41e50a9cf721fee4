"""AnthropicClient over mocked HTTP (``responses``): request shape, errors, retries, secrets."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
from typing import Any, Dict, List

import pytest
import requests
import responses
from helpers import ANTHROPIC_KEY as KEY
from helpers import ANTHROPIC_MESSAGE as MESSAGE
from helpers import ANTHROPIC_URL as URL
from helpers import anthropic_client as client
from helpers import anthropic_error_body as error_body
from helpers import anthropic_request as request

from lattice.cancellation import AbortController
from lattice.errors import (
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    PromptTooLongError,
    RateLimitError,
)
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest

pytestmark = pytest.mark.usefixtures("clean_anthropic_env")


def sent_body(index: int = 0) -> Dict[str, Any]:
    body = responses.calls[index].request.body
    assert isinstance(body, bytes)
    return json.loads(body)  # type: ignore[no-any-return]


# -- request shape -----------------------------------------------------------------------


@responses.activate
def test_request_headers_and_body() -> None:
    responses.add(responses.POST, URL, json=MESSAGE)
    messages = [
        {"role": "user", "content": "Héllo \u2028 ☃"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                          {"type": "tool_use", "id": "tu", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu", "content": "ok"}]},
    ]
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    reply = client().create(request(messages=messages, tools=tools, system=system, max_tokens=99))
    headers = responses.calls[0].request.headers
    assert headers["x-api-key"] == KEY
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["content-type"] == "application/json"
    assert "authorization" not in headers
    assert sent_body() == {"model": "claude-test", "max_tokens": 99, "system": system,
                           "messages": messages, "tools": tools}
    assert reply == {
        "role": "assistant", "content": [{"type": "text", "text": "Hi!"}],
        "stop_reason": "end_turn", "model": "claude-served", "provider_response_id": "msg_01abc",
        "usage": {"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 4,
                  "cache_read_input_tokens": 5},
    }


@responses.activate
def test_system_and_tools_omitted_when_unset_and_extra_passed_through() -> None:
    responses.add(responses.POST, URL, json=MESSAGE)
    extra = {"temperature": 0.2, "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u"},
             "thinking": {"type": "enabled", "budget_tokens": 1024}, "stop_sequences": ["END"]}
    client().create(request(extra=extra))
    body = sent_body()
    assert "system" not in body and "tools" not in body and "stream" not in body
    for key, value in extra.items():
        assert body[key] == value


@responses.activate
def test_streaming_sets_stream_true_and_parses_sse() -> None:
    events = [
        {"type": "message_start", "message": dict(MESSAGE, content=[], stop_reason=None,
                                                  usage={"input_tokens": 12, "output_tokens": 1})},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    responses.add(responses.POST, URL, body=body, content_type="text/event-stream")
    seen: List[Dict[str, Any]] = []
    reply = client(stream=True).create(request(on_event=seen.append))
    assert sent_body()["stream"] is True
    assert reply["content"] == [{"type": "text", "text": "Hi!"}]
    assert reply["usage"]["output_tokens"] == 3 and reply["usage"]["input_tokens"] == 12
    assert seen == events


@responses.activate
def test_streaming_request_answered_with_json_still_works() -> None:
    responses.add(responses.POST, URL, json=MESSAGE)
    assert client(stream=True).create(request())["content"] == MESSAGE["content"]


@responses.activate
def test_bearer_token_instead_of_key() -> None:
    responses.add(responses.POST, URL, json=MESSAGE)
    AnthropicClient(auth_token="tok-123456789", stream=False).create(request())
    headers = responses.calls[0].request.headers
    assert headers["authorization"] == "Bearer tok-123456789"
    assert "x-api-key" not in headers


@responses.activate
def test_env_defaults_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://proxy.local:8080/")
    responses.add(responses.POST, "http://proxy.local:8080/v1/messages", json=MESSAGE)
    c = AnthropicClient(stream=False)  # no key yet: construction does not fail
    assert c.base_url == "http://proxy.local:8080"
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "env-token-123")
    c.create(request())
    headers = responses.calls[0].request.headers
    assert headers["x-api-key"] == KEY and headers["authorization"] == "Bearer env-token-123"


@responses.activate
def test_explicit_key_ignores_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "env-token-123")
    responses.add(responses.POST, "https://example.test/v1/messages", json=MESSAGE)
    AnthropicClient(KEY, "https://example.test/", stream=False).create(request())
    assert "authorization" not in responses.calls[0].request.headers


@responses.activate
def test_default_headers_and_user_session_are_used() -> None:
    responses.add(responses.POST, URL, json=MESSAGE)
    session = requests.Session()
    session.headers["x-from-session"] = "yes"
    c = AnthropicClient(KEY, session=session, default_headers={"anthropic-beta": "b1"},
                        stream=False)
    c.create(request())
    headers = responses.calls[0].request.headers
    assert headers["anthropic-beta"] == "b1" and headers["x-from-session"] == "yes"
    c.close()  # the user's session is left open
    assert session.adapters


def test_missing_credentials_fail_at_create_not_construction() -> None:
    c = AnthropicClient()
    with pytest.raises(AuthenticationError, match="no API key") as info:
        c.create(request())
    assert info.value.status_code is None


@pytest.mark.parametrize(("kwargs", "option"), [
    ({"api_key": ""}, "api_key"), ({"api_key": 5}, "api_key"), ({"auth_token": " "}, "auth_token"),
    ({"max_retries": -1}, "max_retries"), ({"max_retries": True}, "max_retries"),
    ({"stream": "yes"}, "stream"), ({"timeout_ms": 0}, "timeout_ms"),
    ({"timeout_ms": True}, "timeout_ms"), ({"default_headers": {"a": 1}}, "default_headers"),
    ({"default_headers": "abc"}, "default_headers"), ({"default_headers": 5}, "default_headers"),
    ({"session": object()}, "session"), ({"base_url": "ftp://x"}, "base_url"),
    ({"retry_policy": {"max_retries": 1}}, "retry_policy"),
])
def test_bad_options_raise_value_error_naming_them(kwargs: Dict[str, Any], option: str) -> None:
    with pytest.raises(ValueError, match=option):
        AnthropicClient(**kwargs)


def test_request_without_model_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="model"):
        AnthropicClient(KEY).create(ModelRequest(model=None, messages=[]))


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind", "cls"), [
    (400, "invalid_request_error", BadRequestError),
    (401, "authentication_error", AuthenticationError),
    (403, "permission_error", PermissionDeniedError),
    (404, "not_found_error", NotFoundError),
    (413, "request_too_large", APIStatusError),
    (422, "invalid_request_error", APIStatusError),
    (429, "rate_limit_error", RateLimitError),
    (500, "api_error", InternalServerError),
    (503, "api_error", InternalServerError),
    (529, "overloaded_error", OverloadedError),
])
@responses.activate
def test_status_maps_to_error_class(status: int, kind: str, cls: type) -> None:
    responses.add(responses.POST, URL, status=status, json=error_body(kind, f"it failed {status}"),
                  headers={"request-id": "req_123"})
    with pytest.raises(APIStatusError) as info:
        client(max_retries=0).create(request())
    err = info.value
    assert type(err) is cls
    assert err.status_code == status and err.request_id == "req_123"
    assert err.message == f"it failed {status}"
    assert err.body == error_body(kind, f"it failed {status}")
    assert "req_123" in str(err)


@pytest.mark.parametrize(("status", "message"), [
    (400, "prompt is too long: 210000 tokens > 200000 maximum"),
    (400, "Input is too long for requested model."),
    (413, "The request exceeds the context window"),
    (400, "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000"),
])
@responses.activate
def test_prompt_too_long(status: int, message: str) -> None:
    responses.add(responses.POST, URL, status=status,
                  json=error_body("invalid_request_error", message))
    with pytest.raises(PromptTooLongError) as info:
        client().create(request())
    assert isinstance(info.value, BadRequestError) and info.value.status_code == status


@responses.activate
def test_other_400_is_not_prompt_too_long() -> None:
    responses.add(responses.POST, URL, status=400,
                  json=error_body("invalid_request_error", "messages: roles must alternate"))
    with pytest.raises(BadRequestError) as info:
        client().create(request())
    assert not isinstance(info.value, PromptTooLongError)


@responses.activate
def test_request_id_from_body_and_text_body_fallback() -> None:
    responses.add(responses.POST, URL, status=404,
                  json=error_body("not_found_error", "model: nope", request_id="req_body"))
    responses.add(responses.POST, URL, status=502, body="<html>Bad Gateway</html>")
    with pytest.raises(NotFoundError) as info:
        client().create(request())
    assert info.value.request_id == "req_body"
    with pytest.raises(InternalServerError) as info2:
        client(max_retries=0).create(request())
    assert info2.value.message == "<html>Bad Gateway</html>"
    assert info2.value.body == "<html>Bad Gateway</html>"


@responses.activate
def test_malformed_success_body_is_a_connection_error() -> None:
    responses.add(responses.POST, URL, body="not json", content_type="application/json")
    with pytest.raises(APIConnectionError, match="malformed"):
        client().create(request())
    assert len(responses.calls) == 1


# -- retries ------------------------------------------------------------------------------


def test_already_aborted_signal_sends_nothing() -> None:
    controller = AbortController()
    controller.abort(KeyboardInterrupt("custom reason"))
    with pytest.raises(KeyboardInterrupt):
        AnthropicClient(KEY).create(request(signal=controller.signal))


# -- secrets ------------------------------------------------------------------------------


@responses.activate
def test_api_key_never_in_repr_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"invalid x-api-key: {KEY}"
    responses.add(responses.POST, URL, status=529, json=error_body("overloaded_error", echo))
    responses.add(responses.POST, URL, body=requests.ConnectionError(f"refused {KEY}"))
    responses.add(responses.POST, URL, status=401, json=error_body("authentication_error", echo))
    c = client()
    assert KEY not in repr(c) and KEY not in str(c)
    with pytest.raises(AuthenticationError) as info:
        c.create(request())
    assert KEY not in str(info.value) and KEY not in repr(info.value)
    assert KEY not in json.dumps(info.value.body)
    assert KEY not in info.value.message
    assert "retry" in caplog.text.lower()
    assert KEY not in caplog.text
    with pytest.raises(ValueError) as bad:
        AnthropicClient(api_key=KEY, max_retries=-1)
    assert KEY not in str(bad.value)


def test_importing_the_client_does_not_import_requests() -> None:
    code = ("import sys, lattice.models.anthropic, lattice.models.sse, lattice.models.retry, "
            "lattice.testing.mock_server; assert 'requests' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_close_and_context_manager() -> None:
    with AnthropicClient(KEY) as c:
        session = c._get_session()
        assert c._get_session() is session
    assert c._session is None


# -- the client's own session --------------------------------------------------------------


def test_own_session_reads_proxy_env_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    session = AnthropicClient(KEY)._get_session()
    assert session.trust_env is False
    assert session.proxies["https"] == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "api.anthropic.com")
    assert "https" not in AnthropicClient(KEY)._get_session().proxies


def test_own_session_pool_is_sized_for_many_threads() -> None:
    adapter = AnthropicClient(KEY)._get_session().get_adapter("https://api.anthropic.com")
    assert adapter._pool_maxsize >= 32  # type: ignore[attr-defined]


# -- cutting (cutoff.py) with stand-in connections -------------------------------------------


def test_cut_reaches_only_the_connection_the_call_holds() -> None:
    from lattice.models import cutoff

    a, b = socket.socketpair()
    conn = type("Conn", (), {"sock": a})()
    call = cutoff.HeldCall(request(), [], None)
    call.activate()
    cutoff.attach(conn)
    assert call.conn is conn
    cutoff.detach(conn)  # back in the pool: the call lets go
    assert call.conn is None
    call.cut("timeout")
    a.settimeout(0.5)
    b.sendall(b"x")
    assert a.recv(1) == b"x"  # still open
    other = cutoff.HeldCall(request(), [], None)
    other.activate()
    cutoff.attach(conn)
    other.cut("abort")
    assert a.recv(1) == b""  # shut down: a blocked reader would return now
    other.finish()
    call.finish()
    a.close()
    b.close()


def test_cut_before_attach_shuts_the_connection_at_once() -> None:
    from lattice.models import cutoff

    a, b = socket.socketpair()
    conn = type("Conn", (), {"sock": a})()
    call = cutoff.HeldCall(request(), [], None)
    call.activate()
    call.cut("abort")
    cutoff.attach(conn)
    a.settimeout(0.5)
    assert a.recv(1) == b""
    call.finish()
    call.cut("timeout")  # after finish: nothing happens
    assert call.cause == "abort"
    a.close()
    b.close()
