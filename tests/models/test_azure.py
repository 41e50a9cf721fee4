"""AzureOpenAIChatClient and AzureOpenAIResponsesClient: URLs, credentials (a token
provider asked again after a 401, OpenAIResponsesClient's too), options."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import List

import pytest

from lattice import Agent
from lattice.errors import AuthenticationError, NotFoundError, RequestTimeoutError
from lattice.models.azure import AzureOpenAIChatClient, AzureOpenAIResponsesClient
from lattice.models.base import ModelRequest
from lattice.models.responses import OpenAIResponsesClient
from lattice.testing import MockMessagesServer

REQUEST = ModelRequest(model=None, messages=[{"role": "user", "content": "hi"}])


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "OPENAI_API_KEY",
                 "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_on_the_deployment_url_with_api_key(stream: bool) -> None:
    with MockMessagesServer(["Hello from Azure."]) as server:
        client = AzureOpenAIChatClient(endpoint=server.base_url + "/", deployment="gpt-4o",
                                       api_version="2024-10-21", api_key="azure-key-0123456789",
                                       stream=stream)
        reply = client.create(REQUEST)
        assert reply["content"] == [{"type": "text", "text": "Hello from Azure."}]
        assert server.request_headers[0]["api-key"] == "azure-key-0123456789"
        assert "authorization" not in server.request_headers[0]
        assert server.requests[0]["model"] == "gpt-4o"  # the deployment, when none is given
        server.add("Agent reply.")
        assert Agent(model="gpt-4o", model_client=client).prompt("hi").result == "Agent reply."


def test_token_provider_called_per_request_and_api_key_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[int] = []

    def provider() -> str:
        calls.append(1)
        return f"entra-token-{len(calls):04d}"

    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-must-not-leak")
    with MockMessagesServer(["a", "b", "c"]) as server:
        client = AzureOpenAIChatClient(endpoint=server.base_url, deployment="d",
                                       api_version="2024-10-21", token_provider=provider)
        client.create(REQUEST)
        client.create(REQUEST)
        assert [h["authorization"] for h in server.request_headers] == [
            "Bearer entra-token-0001", "Bearer entra-token-0002"]
        both = AzureOpenAIChatClient(endpoint=server.base_url, deployment="d",
                                     api_version="v", api_key="key-wins-0123",
                                     token_provider=provider)
        both.create(REQUEST)
        assert server.request_headers[2]["api-key"] == "key-wins-0123"
        assert "authorization" not in server.request_headers[2] and len(calls) == 2


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with MockMessagesServer(["a"]) as server:
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.base_url)
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", "env-azure-key-123")
        client = AzureOpenAIChatClient(deployment="d", api_version="2024-10-21")
        client.create(REQUEST)
        assert server.request_headers[0]["api-key"] == "env-azure-key-123"


def test_options_and_errors() -> None:
    with pytest.raises(ValueError, match="AZURE_OPENAI_ENDPOINT"):
        AzureOpenAIChatClient(deployment="d", api_version="v")
    with pytest.raises(ValueError, match="deployment"):
        AzureOpenAIChatClient(endpoint="https://x.openai.azure.com", deployment=" ",
                              api_version="v")
    with pytest.raises(ValueError, match="endpoint"):
        AzureOpenAIChatClient(endpoint="x.openai.azure.com", deployment="d", api_version="v")
    with pytest.raises(ValueError, match="token_provider"):
        AzureOpenAIChatClient(endpoint="https://x.openai.azure.com", deployment="d",
                              api_version="v", token_provider="tok")  # type: ignore[arg-type]
    client = AzureOpenAIChatClient(endpoint="https://x.openai.azure.com", deployment="d",
                                   api_version="v")
    with pytest.raises(AuthenticationError, match="AZURE_OPENAI_API_KEY"):
        client.create(REQUEST)
    assert "x.openai.azure.com" in repr(client)


def test_not_found_names_the_deployment() -> None:
    with MockMessagesServer([MockMessagesServer.error(404, "The API deployment for this "
                                                           "resource does not exist.")]) as s:
        client = AzureOpenAIChatClient(endpoint=s.base_url, deployment="nope",
                                       api_version="v", api_key="k" * 10, max_retries=0)
        with pytest.raises(NotFoundError, match="deployment name"):
            client.create(REQUEST)


@pytest.mark.parametrize("api_version", [None, "2025-04-01-preview"])
def test_responses_on_azure(api_version: str) -> None:
    with MockMessagesServer(["from Azure Responses"]) as server:
        client = AzureOpenAIResponsesClient(endpoint=server.base_url, api_key="azure-0123456",
                                            api_version=api_version)
        reply = client.create(ModelRequest(model="my-deployment", messages=[
            {"role": "user", "content": "hi"}]))
        assert reply["content"] == [{"type": "text", "text": "from Azure Responses"}]
        assert server.request_headers[0]["api-key"] == "azure-0123456"
        assert server.requests[0]["store"] is False


CLIENTS = {  # every client that takes a token provider; retries off (the second try
    # after a 401 is not the retry policy's)
    "azure-chat": lambda url, provider, key: AzureOpenAIChatClient(
        endpoint=url, deployment="d", api_version="v1", api_key=key,
        token_provider=provider, max_retries=0),
    "azure-responses": lambda url, provider, key: AzureOpenAIResponsesClient(
        endpoint=url, api_key=key, token_provider=provider, max_retries=0),
    "openai-responses": lambda url, provider, key: OpenAIResponsesClient(
        base_url=url, api_key=key, token_provider=provider, max_retries=0),
}


@pytest.mark.parametrize("which", CLIENTS)
def test_after_a_401_the_token_provider_is_asked_again_and_the_request_sent_once_more(
        which: str, caplog: pytest.LogCaptureFixture) -> None:
    tokens = iter(["stale-token-0001", "fresh-token-0002", "stale-token-0003",
                   "stale-token-0004", "never-asked-0005"])
    request = dataclasses.replace(REQUEST, model="m")
    with MockMessagesServer([MockMessagesServer.error(401, "token expired"), "fresh",
                             MockMessagesServer.error(401, "no"),
                             MockMessagesServer.error(401, "still no")]) as server:
        client = CLIENTS[which](server.base_url, lambda: next(tokens), None)
        with caplog.at_level(logging.INFO, logger="lattice"):
            assert client.create(request)["content"][0]["text"] == "fresh"
        assert "401 to the token provider's token" in caplog.text
        assert "token-000" not in caplog.text  # the tokens are never logged
        with pytest.raises(AuthenticationError) as raised:  # sent once more, not twice
            client.create(request)
        assert raised.value.status_code == 401 and "stale" not in str(raised.value)
        assert [h["authorization"] for h in server.request_headers] == [
            f"Bearer {t}" for t in ("stale-token-0001", "fresh-token-0002",
                                    "stale-token-0003", "stale-token-0004")]
    assert next(tokens) == "never-asked-0005"


@pytest.mark.parametrize("which", CLIENTS)
def test_a_401_to_a_key_is_not_sent_again(which: str) -> None:
    asked: List[int] = []
    with MockMessagesServer([MockMessagesServer.error(401, "bad key"), "never"]) as server:
        client = CLIENTS[which](server.base_url, lambda: str(asked.append(1)), "wrong-key-0123")
        with pytest.raises(AuthenticationError):
            client.create(dataclasses.replace(REQUEST, model="m"))
        assert len(server.requests) == 1 and asked == []


def test_the_second_try_after_a_401_keeps_the_requests_deadline() -> None:
    tokens = iter(["stale-token-0001", "fresh-token-0002"])
    with MockMessagesServer([MockMessagesServer.error(401, "expired"),
                             MockMessagesServer.delay(10, "late")]) as server:
        client = CLIENTS["azure-chat"](server.base_url, lambda: next(tokens), None)
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            client.create(dataclasses.replace(REQUEST, timeout_ms=500))
        assert time.monotonic() - started < 3
        assert len(server.requests) == 2
