"""AnthropicVertexClient against MockMessagesServer's Vertex routes: URLs, body, bearer
tokens (fixed, a provider called per request and once more after a 401, google-auth
application-default credentials), tool loops, abort and timeout mid-stream."""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any, List

import pytest
import responses
from helpers import assert_abort_mid_stream, assert_timeout_mid_stream, lookup, lookup_call

from lattice import (
    Agent,
    AnthropicVertexClient,
    AuthenticationError,
    RateLimitError,
    RequestTimeoutError,
)
from lattice.models.base import ModelRequest
from lattice.testing import MockMessagesServer, assert_well_formed

MODEL = "claude-sonnet-4-5@20250929"
TOKEN = "ya29.mock-access-token-0123456789"


def client(server: MockMessagesServer, **options: Any) -> AnthropicVertexClient:
    if "token_provider" not in options:
        options.setdefault("access_token", TOKEN)
    options.setdefault("project_id", "my-project")
    options.setdefault("region", "us-east5")
    return AnthropicVertexClient(base_url=server.base_url, **options)


def request(model: str = MODEL) -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("stream", [True, False])
def test_a_tool_loop(stream: bool) -> None:
    with MockMessagesServer([lookup_call, "done"], vertex_token=TOKEN) as server:
        agent = Agent(model=MODEL, model_client=client(server, stream=stream), tools=[lookup],
                      include_partial_messages=True)
        messages = list(agent.query("go"))
        assert messages[-1].subtype == "success" and messages[-1].result == "done"
        assert any(m.type == "stream_event" for m in messages) is stream
        assert_well_formed(agent.get_history())
        for body, headers in zip(server.requests, server.request_headers):
            assert body["anthropic_version"] == "vertex-2023-10-16" and "model" not in body
            assert body.get("stream", False) is stream
            assert headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("region, base_url, expected", [
    ("us-east5", None, "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/"
     "us-east5/publishers/anthropic/models/claude-x@1:streamRawPredict"),
    ("global", None, "https://aiplatform.googleapis.com/v1/projects/p/locations/global/"
     "publishers/anthropic/models/claude-x@1:streamRawPredict"),
    ("europe-west1", "https://proxy.example.com/v1", "https://proxy.example.com/v1/projects/p/"
     "locations/europe-west1/publishers/anthropic/models/claude-x@1:streamRawPredict"),
    ("europe-west1", "https://proxy.example.com/", "https://proxy.example.com/v1/projects/p/"
     "locations/europe-west1/publishers/anthropic/models/claude-x@1:streamRawPredict"),
])
@responses.activate
def test_urls(region: str, base_url: Any, expected: str) -> None:
    responses.add(responses.POST, expected, status=429, json={"error": {
        "code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}})
    vertex = AnthropicVertexClient(project_id="p", region=region, access_token=TOKEN,
                                   base_url=base_url, max_retries=0)
    with pytest.raises(RateLimitError, match="Quota exceeded"):
        vertex.create(ModelRequest(model="claude-x@1", messages=[{"role": "user",
                                                                   "content": "x"}]))
    assert responses.calls[0].request.url == expected


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "env-project")
    monkeypatch.setenv("CLOUD_ML_REGION", "global")
    vertex = AnthropicVertexClient(access_token=TOKEN)
    assert (vertex.project_id, vertex.region) == ("env-project", "global")
    assert vertex.base_url == "https://aiplatform.googleapis.com"
    monkeypatch.delenv("CLOUD_ML_REGION")
    with pytest.raises(ValueError, match="region: pass region= or set CLOUD_ML_REGION"):
        AnthropicVertexClient(access_token=TOKEN)
    with pytest.raises(ValueError, match="not both"):
        AnthropicVertexClient(region="r", access_token=TOKEN, token_provider=lambda: "t")
    with pytest.raises(ValueError, match="token_provider must be a callable"):
        AnthropicVertexClient(region="r", token_provider="t")  # type: ignore[arg-type]


def test_a_token_provider_is_called_for_every_request() -> None:
    calls: List[int] = []

    def provider() -> str:
        calls.append(1)
        return TOKEN

    with MockMessagesServer(["a", "b", "c"], vertex_token=TOKEN) as server:
        vertex = client(server, token_provider=provider)
        for _ in range(3):
            vertex.create(request())
    assert len(calls) == 3


def test_after_a_401_the_provider_is_asked_again_and_the_request_retried_once() -> None:
    tokens = iter(["stale-token-123456", TOKEN, "stale-again-123456", "stale-thrice-1234"])
    with MockMessagesServer(["fresh"], vertex_token=TOKEN) as server:
        vertex = client(server, token_provider=lambda: next(tokens), max_retries=0)
        assert vertex.create(request())["content"][0]["text"] == "fresh"
        with pytest.raises(AuthenticationError) as raised:  # retried once only
            vertex.create(request())
        assert raised.value.status_code == 401
        assert "stale" not in str(raised.value)
    with MockMessagesServer(vertex_token=TOKEN) as server:  # a fixed token: no retry
        with pytest.raises(AuthenticationError):
            client(server, access_token="wrong-token-0123").create(request())


def _fake_google_auth(monkeypatch: pytest.MonkeyPatch, Creds: Any) -> None:
    google = types.ModuleType("google")
    auth = types.ModuleType("google.auth")
    auth.default = lambda scopes: (Creds(), "adc-project")  # type: ignore[attr-defined]
    transport = types.ModuleType("google.auth.transport")
    transport_requests = types.ModuleType("google.auth.transport.requests")
    transport_requests.Request = lambda: "a-request"  # type: ignore[attr-defined]
    google.auth = auth  # type: ignore[attr-defined]
    for name, module in (("google", google), ("google.auth", auth),
                         ("google.auth.transport", transport),
                         ("google.auth.transport.requests", transport_requests)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr("lattice.models.vertex._has_google_auth", lambda: True)


def test_google_application_default_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    refreshed: List[Any] = []

    class Creds:
        valid = False
        token = None

        def refresh(self, request: Any) -> None:
            refreshed.append(request)
            self.token, self.valid = TOKEN, True

    _fake_google_auth(monkeypatch, Creds)
    with MockMessagesServer(["one", "two"], vertex_token=TOKEN) as server:
        vertex = AnthropicVertexClient(project_id="p", region="us-east5",
                                       base_url=server.base_url)
        vertex.create(request())
        vertex.create(request())
    assert refreshed == ["a-request"]  # refreshed once, then valid


@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_google_credentials_are_bounded_and_fail_as_authentication_errors(
        monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A hung metadata server ends at the request's deadline; a refresh that raises is an
    AuthenticationError (SPEC 21b, as for a token_provider)."""
    from lattice import VertexGeminiClient

    release = threading.Event()

    class Creds:
        valid = False
        token = None

        def refresh(self, request: Any) -> None:
            if not release.is_set():
                release.wait(10)  # the metadata server does not answer
            raise RuntimeError("Failed to retrieve http://metadata/token")

    _fake_google_auth(monkeypatch, Creds)
    cls: Any = AnthropicVertexClient if kind == "anthropic" else VertexGeminiClient
    with MockMessagesServer(["never"], vertex_token=TOKEN) as server:
        vertex = cls(project_id="p", region="us-east5", base_url=server.base_url,
                     timeout_ms=300, max_retries=0)
        began = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            vertex.create(request(model="gemini-2.5-flash"))
        assert time.monotonic() - began < 5
        release.set()
        with pytest.raises(AuthenticationError, match="RuntimeError: Failed to retrieve"):
            vertex.create(request(model="gemini-2.5-flash"))
        assert server.requests == []


def test_without_any_way_to_a_token_the_error_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lattice.models.vertex._has_google_auth", lambda: False)
    with pytest.raises(ValueError, match=r"agent-lattice\[vertex\]"):
        AnthropicVertexClient(project_id="p", region="r")


def test_abort_and_timeout_mid_stream() -> None:
    with MockMessagesServer([MockMessagesServer.hang(after_events=3)]) as server:
        assert_abort_mid_stream(client(server), MODEL)
    with MockMessagesServer([MockMessagesServer.hang(after_events=3)]) as server:
        assert_timeout_mid_stream(client(server), MODEL)


def test_the_retry_after_a_401_keeps_the_requests_deadline() -> None:
    tokens = iter(["stale-token-123456", TOKEN])
    with MockMessagesServer([MockMessagesServer.delay(10, "late")], vertex_token=TOKEN
                            ) as server:
        vertex = client(server, token_provider=lambda: next(tokens), timeout_ms=500)
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            vertex.create(request())
        assert time.monotonic() - started < 3


@pytest.mark.parametrize("region", ["x@evil.com\\", "evil.com", "us central1", "us_central1"])
@pytest.mark.parametrize("kind", ["anthropic", "gemini"])
def test_a_region_that_is_not_a_region_name_is_refused(kind, region, monkeypatch):
    """The region goes into the host name: "x@evil.com\\" would send the token to evil.com."""
    from lattice import AnthropicVertexClient, VertexGeminiClient

    cls = AnthropicVertexClient if kind == "anthropic" else VertexGeminiClient
    with pytest.raises(ValueError, match="region must be a Google Cloud region name") as info:
        cls(project_id="p", region=region, access_token="t")
    assert repr(region.strip()) in str(info.value)
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", region)
    monkeypatch.setenv("CLOUD_ML_REGION", region)
    with pytest.raises(ValueError, match="region must be"):
        cls(project_id="p", access_token="t")
