"""No secret of the Bedrock and Vertex clients (AWS secret key, session token, bearer token)
in any error, log record, span or repr, even when a server echoes them back."""

from __future__ import annotations

import logging
from typing import Any, Iterator, List

import pytest

from lattice import Agent, AnthropicBedrockClient, AnthropicVertexClient, APIError
from lattice.testing import MockMessagesServer

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from lattice.observe.tracing import OtelObserver  # noqa: E402

SECRET = "wJalrXUtnFEMI-K7MDENG-secret-key-0001"
SESSION = "IQoJb3JpZ2luX2VjE-session-token-0002"
BEARER = "ya29.vertex-bearer-token-0003"
SECRETS = (SECRET, SESSION, BEARER)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def echo(*secrets: str) -> Any:
    """A scripted reply that echoes ``secrets`` back in an error, as a careless proxy may."""
    return lambda body: MockMessagesServer.error(400, "you sent " + " ".join(secrets))


def run(client: Any, exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
        ) -> List[str]:
    """Run an echoing error and a success through an Agent; return every text shown."""
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OtelObserver(trace_content=True, tracer_provider=provider)
    agent = Agent(model="anthropic.claude-x-v1:0", model_client=client, observers=[observer])
    shown: List[str] = [repr(client), str(client)]
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(APIError) as raised:
            agent.prompt("first")
        shown += [str(raised.value), repr(raised.value), str(raised.value.body),
                  str(raised.value.request_id)]
        assert agent.prompt("second").result == "fine"
    shown += [record.getMessage() for record in caplog.records]
    shown += [str(record.args) for record in caplog.records]
    for span in exporter.get_finished_spans():
        shown += [str(dict(span.attributes or {})), str(span.status.description),
                  str([event.attributes for event in span.events])]
    return shown


@pytest.mark.parametrize("stream", [True, False])
def test_bedrock_shows_no_secret(stream: bool, exporter: InMemorySpanExporter,
                                 caplog: pytest.LogCaptureFixture) -> None:
    with MockMessagesServer([echo(SECRET, SESSION), "fine"],
                            bedrock_credentials=("AKIAEXAMPLE", SECRET)
                            ) as server:
        client = AnthropicBedrockClient(region="us-east-1", access_key_id="AKIAEXAMPLE",
                                        secret_access_key=SECRET, session_token=SESSION,
                                        base_url=server.base_url, stream=stream, max_retries=0)
        shown = run(client, exporter, caplog)
    assert any("you sent" in text for text in shown)
    for secret in SECRETS:
        assert not any(secret in text for text in shown), secret


def test_bedrock_credentials_from_the_environment_are_not_shown(
        monkeypatch: pytest.MonkeyPatch, exporter: InMemorySpanExporter,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION)
    with MockMessagesServer([echo(SECRET, SESSION), "fine"],
                            bedrock_credentials=("AKIAEXAMPLE", SECRET)
                            ) as server:
        client = AnthropicBedrockClient(region="eu-west-1", base_url=server.base_url,
                                        max_retries=0)
        shown = run(client, exporter, caplog)
    for secret in SECRETS:
        assert not any(secret in text for text in shown), secret


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("how", ["access_token", "token_provider"])
def test_vertex_shows_no_secret(stream: bool, how: str, exporter: InMemorySpanExporter,
                                caplog: pytest.LogCaptureFixture) -> None:
    auth: Any = {"access_token": BEARER} if how == "access_token" else {
        "token_provider": lambda: BEARER}
    with MockMessagesServer([echo(BEARER), "fine"], vertex_token=BEARER) as server:
        client = AnthropicVertexClient(project_id="p", region="us-east5",
                                       base_url=server.base_url, stream=stream, max_retries=0,
                                       **auth)
        shown = run(client, exporter, caplog)
    assert any("you sent" in text for text in shown)
    for secret in SECRETS:
        assert not any(secret in text for text in shown), secret
