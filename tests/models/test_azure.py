"""AzureOpenAIChatClient and AzureOpenAIResponsesClient: URLs, credentials, options."""

from __future__ import annotations

from typing import List

import pytest

from lattice import Agent
from lattice.errors import AuthenticationError, NotFoundError
from lattice.models.azure import AzureOpenAIChatClient, AzureOpenAIResponsesClient
from lattice.models.base import ModelRequest
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
