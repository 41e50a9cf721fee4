"""The one HTTP stack (issue 22): sessions, error mapping, retry signal, timeout kinds, and
the extension points new providers use (a per-attempt signer, a per-call URL, stream
content types)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import requests
import responses
from raw_server import SECRET, client, error_json, message_json, request

from lattice import Agent, RequestTimeoutError
from lattice.errors import APIConnectionError, BadRequestError
from lattice.mcp import MCPServerHTTP
from lattice.models import http
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.testing import FunctionModelClient

pytestmark = pytest.mark.usefixtures("clean_anthropic_env")


def test_sessions_share_adapter_classes_built_once() -> None:
    one = http.new_session("http://127.0.0.1:1")
    two = AnthropicClient(SECRET)._get_session()
    mcp = MCPServerHTTP("http://127.0.0.1:1/mcp")
    mcp._prepare()
    three = mcp._open(1000)._http  # type: ignore[attr-defined]
    adapters = [type(s.get_adapter("http://x")) for s in (one, two, three)]
    assert adapters[0] is adapters[1] is adapters[2]
    assert adapters[0].__module__ == "lattice.models.http"
    for session in (one, two, three):
        session.close()


def test_the_ca_bundle_from_the_environment_is_set_for_https_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    # requests stats a verify path on every request: a plain-HTTP client (a local server)
    # must not pay for a bundle it never uses.
    bundle = str(tmp_path / "ca.pem")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", bundle)
    secure, plain = http.new_session("https://x.test/v1"), http.new_session("http://127.0.0.1:1")
    assert (secure.verify, plain.verify) == (bundle, True)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.setenv("CURL_CA_BUNDLE", bundle)
    assert http.new_session("HTTPS://x.test").verify == bundle


def test_mcp_errors_are_worded_by_the_model_transport() -> None:
    server = MCPServerHTTP("http://127.0.0.1:9/mcp", timeout_ms=3000)  # discard: refused
    with pytest.raises(Exception) as mcp_error:
        server.start()
    model = AnthropicClient(SECRET, base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(APIConnectionError) as model_error:
        model.create(request())
    assert str(model_error.value).endswith("Connection refused")
    assert str(mcp_error.value).endswith("Connection refused")


def test_only_retryable_statuses_raise_the_retry_signal(raw: Any) -> None:
    server = raw(error_json(400, "nope"), error_json(503, "busy"), message_json())
    waits: List[float] = []
    with pytest.raises(BadRequestError) as info:
        client(server, waits, max_retries=2).create(request())
    assert info.value.__context__ is None  # raised as is, not via the internal signal
    assert waits == [] and len(server.requests) == 1
    client(server, waits, max_retries=2).create(request())
    assert len(waits) == 1 and len(server.requests) == 3


# -- RequestTimeoutError.kind ---------------------------------------------------------------


def test_timeout_kinds_from_the_transport_errors() -> None:
    def kind(exc: BaseException) -> str:
        error = http.transport_failure(exc, api="X", shown_url="http://h", secrets=[])
        assert isinstance(error, RequestTimeoutError)
        return error.kind

    assert kind(requests.ConnectTimeout("slow connect")) == "connect"
    assert kind(requests.ReadTimeout("silent")) == "read"
    assert kind(requests.ConnectionError(requests.ReadTimeout("wrapped"))) == "read"


def test_the_deadline_is_kind_request(raw: Any) -> None:
    def slow(handler: Any, server: Any) -> None:
        server.closing.wait(5)

    server = raw(slow)
    with pytest.raises(RequestTimeoutError) as info:
        client(server, timeout_ms=300).create(request())
    assert info.value.kind == "request"


def test_the_loops_own_deadline_is_kind_request() -> None:
    def slow(request: ModelRequest) -> str:
        request.signal.wait(5)
        return "late"

    agent = Agent(model_client=FunctionModelClient(slow), request_timeout_ms=200)
    result = agent.prompt("hi")
    assert isinstance(result.error, RequestTimeoutError) and result.error.kind == "request"


def test_timeout_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="kind"):
        RequestTimeoutError("x", kind="soon")


# -- extension points: a signer, a per-call URL, stream content types ------------------------


@responses.activate
def test_signer_runs_before_every_attempt_and_secrets_are_redacted() -> None:
    url = "https://api.anthropic.com/v1/messages"
    signing_key = "signing-key-0123456789-SECRET"
    responses.add(responses.POST, url, status=503, json={"error": {"message": "busy"}})
    responses.add(responses.POST, url, status=400,
                  json={"error": {"type": "invalid_request_error",
                                  "message": f"bad signature {signing_key}"}})
    signed: List[Dict[str, Any]] = []

    def sign(url: str, body: bytes, headers: Dict[str, str]) -> Dict[str, str]:
        signed.append({"url": url, "body": body})
        return {**headers, "authorization": f"Signed {len(signed)}"}

    model = AnthropicClient(SECRET, stream=False)
    model._transport.retry_policy = type(model.retry_policy)(max_retries=1, sleep=lambda s: None)
    body, streaming = model._body(request())
    headers, secrets = model._headers()
    with pytest.raises(BadRequestError) as info:
        model._transport.send(request(), body, headers, secrets + [signing_key], streaming,
                              sign=sign)
    assert len(signed) == 2 and all(s["url"] == url for s in signed)
    assert json.loads(signed[0]["body"])["model"] == "claude-test"
    sent = [c.request.headers["authorization"] for c in responses.calls]
    assert sent == ["Signed 1", "Signed 2"]
    assert signing_key not in str(info.value) and "***" in str(info.value)


@responses.activate
def test_a_call_may_name_its_own_url() -> None:
    other = "https://api.anthropic.com/model/abc/invoke?x=secret-query-value"
    responses.add(responses.POST, other, json=message_json()[2])
    model = AnthropicClient(SECRET, stream=False)
    body, streaming = model._body(request())
    headers, secrets = model._headers()
    reply = model._transport.send(request(), body, headers, secrets, streaming, url=other)
    assert reply["content"][0]["text"] == "hi there"
    assert responses.calls[0].request.url == other


@responses.activate
def test_a_codec_names_the_content_types_it_reads_as_streams() -> None:
    from lattice.models.anthropic import MessagesCodec

    seen: List[Any] = []

    class FramesCodec(MessagesCodec):
        stream_type = "application/x-frames"

        def read_stream(self, chunks: Any, on_event: Any, limit: int) -> Dict[str, Any]:
            seen.append((b"".join(chunks), limit))
            return {"role": "assistant", "content": [], "stop_reason": "end_turn"}

    responses.add(responses.POST, "https://api.anthropic.com/v1/messages",
                  body=b"\x00\x01frames", content_type="application/x-frames")
    model = AnthropicClient(SECRET, max_response_bytes=1234)
    model._transport.codec = FramesCodec(model.base_url)
    assert model.create(request())["stop_reason"] == "end_turn"
    assert seen == [(b"\x00\x01frames", 1234)]
