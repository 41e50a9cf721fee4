"""The mock's cloud routes as the services check them (SPEC 21b): every
``anthropic_version`` the official SDKs send for Bedrock and Vertex (the legacy values and
dated ``YYYY-MM-DD`` ones) is accepted and lattice keeps sending the legacy ones unless
``anthropic_version=`` says otherwise; the Bedrock route checks the signature's credential
scope (service ``bedrock``, a region name, the request's date); the Azure routes check
``api-key`` against ``azure_api_key`` when the mock has one."""

from __future__ import annotations

import json
from typing import Any, Dict

import pytest
import requests

from lattice import (
    AnthropicBedrockClient,
    AnthropicVertexClient,
    AzureOpenAIChatClient,
    AzureOpenAIResponsesClient,
)
from lattice.errors import AuthenticationError, BadRequestError
from lattice.models.base import ModelRequest
from lattice.models.sigv4 import Credentials, sign_headers
from lattice.testing import MockMessagesServer

MOCK = Credentials("mock-access-key-id", "mock-secret-access-key")
PATH = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
BODY: Dict[str, Any] = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                        "messages": [{"role": "user", "content": "hi"}]}


def request() -> ModelRequest:
    return ModelRequest(model="claude-x", messages=[{"role": "user", "content": "hi"}])


def bedrock(server: MockMessagesServer, **options: Any) -> AnthropicBedrockClient:
    return AnthropicBedrockClient(region="us-east-1", access_key_id=MOCK.access_key_id,
                                  secret_access_key=MOCK.secret_access_key,
                                  base_url=server.base_url, max_retries=0, **options)


def vertex(server: MockMessagesServer, **options: Any) -> AnthropicVertexClient:
    return AnthropicVertexClient(project_id="p", region="us-east5", access_token="t" * 20,
                                 base_url=server.base_url, max_retries=0, **options)


MAKERS = {"bedrock": bedrock, "vertex": vertex}
LEGACY = {"bedrock": "bedrock-2023-05-31", "vertex": "vertex-2023-10-16"}


@pytest.mark.parametrize("cloud", sorted(MAKERS))
@pytest.mark.parametrize("stream", [False, True])
def test_lattice_sends_the_legacy_version_by_default(cloud: str, stream: bool) -> None:
    with MockMessagesServer(["fine"]) as server:
        reply = MAKERS[cloud](server, stream=stream).create(request())
        assert reply["content"][0]["text"] == "fine"
        assert server.requests[0]["anthropic_version"] == LEGACY[cloud]


@pytest.mark.parametrize("cloud", sorted(MAKERS))
@pytest.mark.parametrize("version", ["2023-06-01", "2026-10-21"])  # the SDK 2.17 sends
def test_a_dated_version_is_accepted_and_sent_when_asked_for(cloud: str, version: str
                                                             ) -> None:
    with MockMessagesServer(["fine"]) as server:
        client = MAKERS[cloud](server, anthropic_version=version)
        assert client.create(request())["content"][0]["text"] == "fine"
        assert server.requests[0]["anthropic_version"] == version


@pytest.mark.parametrize("cloud", sorted(MAKERS))
@pytest.mark.parametrize("version", ["2023-13-45", "bedrock-2099-01-01", "latest"])
def test_other_versions_are_refused(cloud: str, version: str) -> None:
    with MockMessagesServer(["fine"]) as server:
        with pytest.raises(BadRequestError, match="anthropic_version"):
            MAKERS[cloud](server, anthropic_version=version).create(request())


@pytest.mark.parametrize("value", ["", " 2023-06-01", 5, None])
def test_the_anthropic_version_option_is_checked(value: Any) -> None:
    with pytest.raises(ValueError, match="anthropic_version"):
        AnthropicVertexClient(project_id="p", region="r", access_token="t" * 20,
                              anthropic_version=value)


def _signed_post(server: MockMessagesServer, *, region: str = "us-east-1",
                 service: str = "bedrock", date: str = "") -> requests.Response:
    data = json.dumps(BODY).encode()
    url = server.base_url + PATH
    headers = {"content-type": "application/json"}
    headers.update(sign_headers("POST", url, headers, data, credentials=MOCK,
                                region=region, service=service))
    if date:  # a scope dated another day, the signature made over it all the same
        headers["authorization"] = headers["authorization"].replace(
            headers["x-amz-date"][:8], date, 1)
    return requests.post(url, data=data, headers=headers, timeout=10)


@pytest.mark.parametrize("scope,words", [
    ({"service": "s3"}, "scoped to correct service: 'bedrock'"),
    ({"region": "nowhere"}, "scoped to a valid region"),
    ({"date": "20000101"}, "Date in Credential scope does not match"),
])
def test_the_bedrock_route_checks_the_credential_scope(scope: Dict[str, str],
                                                       words: str) -> None:
    with MockMessagesServer(["fine"]) as server:
        response = _signed_post(server, **scope)
        assert response.status_code == 403, response.text
        assert words in response.json()["message"]
        assert response.headers["x-amzn-ErrorType"].startswith("InvalidSignatureException")
        assert _signed_post(server).status_code == 200  # the same, scoped right


def _azure(kind: str, server: MockMessagesServer, key: str) -> Any:
    if kind == "chat":
        return AzureOpenAIChatClient(endpoint=server.base_url, deployment="d",
                                     api_version="2024-10-21", api_key=key, max_retries=0)
    return AzureOpenAIResponsesClient(endpoint=server.base_url, api_key=key, max_retries=0)


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_azure_routes_check_the_api_key_when_the_mock_has_one(kind: str) -> None:
    with MockMessagesServer(["fine"], azure_api_key="right-key-0123456789") as server:
        with pytest.raises(AuthenticationError):
            _azure(kind, server, "wrong-key-0123456789").create(request())
        reply = _azure(kind, server, "right-key-0123456789").create(request())
        assert reply["content"][0]["text"] == "fine"
    with MockMessagesServer(["fine"]) as server:  # without one: any key, as before
        assert _azure(kind, server, "any-key-0123456789").create(request())["content"]


def test_the_azure_api_key_option_is_checked() -> None:
    with pytest.raises(ValueError, match="azure_api_key"):
        MockMessagesServer(azure_api_key="")
