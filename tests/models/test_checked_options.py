"""Options are checked, not truthy (SPEC 21b), on the model clients and their test double:
every bool option must be a bool, time limits finite numbers, and a Bedrock region a
region name (it goes in the host name)."""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

from lattice import (
    AbortSignal,
    AnthropicBedrockClient,
    AnthropicClient,
    AnthropicVertexClient,
    AzureOpenAIChatClient,
    AzureOpenAIResponsesClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from lattice.models.retry import RetryPolicy
from lattice.testing import MockMessagesServer

URL = "http://127.0.0.1:9"
MAKERS: Dict[str, Callable[..., Any]] = {
    "anthropic": lambda **o: AnthropicClient("sk-0123456789", base_url=URL, **o),
    "chat": lambda **o: OpenAIChatClient("sk-0123456789", base_url=URL, **o),
    "responses": lambda **o: OpenAIResponsesClient(api_key="sk-0123456789", base_url=URL,
                                                   **o),
    "bedrock": lambda **o: AnthropicBedrockClient(
        region="us-east-1", access_key_id="AKID", secret_access_key="s" * 20, base_url=URL,
        **o),
    "vertex": lambda **o: AnthropicVertexClient(project_id="p", region="us-east5",
                                                access_token="t" * 20, base_url=URL, **o),
    "azure-chat": lambda **o: AzureOpenAIChatClient(endpoint=URL, deployment="d",
                                                    api_version="v", api_key="k" * 20, **o),
    "azure-responses": lambda **o: AzureOpenAIResponsesClient(endpoint=URL,
                                                              api_key="k" * 20, **o),
}
NOT_BOOLS = ["no", 1, 0, None, "True"]


@pytest.mark.parametrize("name", sorted(MAKERS))
@pytest.mark.parametrize("value", NOT_BOOLS)
def test_stream_must_be_a_bool(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match="stream"):
        MAKERS[name](stream=value)


@pytest.mark.parametrize("name", ["responses", "azure-responses"])
@pytest.mark.parametrize("value", NOT_BOOLS)
def test_store_must_be_a_bool(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match="store"):
        MAKERS[name](store=value)


@pytest.mark.parametrize("name", sorted(MAKERS))
@pytest.mark.parametrize("option", ["timeout_ms", "stream_idle_timeout_ms"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_time_limits_must_be_finite(name: str, option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        MAKERS[name](**{option: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, "5", True, None])
def test_abort_signal_timeout_needs_a_finite_number(value: Any) -> None:
    with pytest.raises(ValueError, match="AbortSignal.timeout"):
        AbortSignal.timeout(value)


@pytest.mark.parametrize("option", ["initial_delay", "max_delay", "max_retry_after",
                                    "jitter"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_retry_policy_delays_must_be_finite(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        RetryPolicy(**{option: value})


@pytest.mark.parametrize("region", ["x@127.0.0.1:9/#", "us east 1", "us-east-1/x",
                                    "evil.example.com#", "-", "us-east-1."])
def test_a_bedrock_region_must_be_a_region_name(region: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BEDROCK_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="region must be an AWS region name"):
        AnthropicBedrockClient(region=region, access_key_id="AKID",
                               secret_access_key="s" * 20)
    monkeypatch.setenv("AWS_REGION", region)  # from the environment alike
    with pytest.raises(ValueError, match="region must be an AWS region name"):
        AnthropicBedrockClient(access_key_id="AKID", secret_access_key="s" * 20)


def test_a_region_name_makes_the_host() -> None:
    client = AnthropicBedrockClient(region="eu-central-1", access_key_id="AKID",
                                    secret_access_key="s" * 20)
    assert client.base_url == "https://bedrock-runtime.eu-central-1.amazonaws.com"


@pytest.mark.parametrize("option", ["record", "strict", "repeat", "stream"])
def test_the_mock_servers_bool_options_are_checked(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        MockMessagesServer(**{option: "no"})
