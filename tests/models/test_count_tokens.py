"""``client.count_tokens(request)`` (SPEC 25): each service's endpoint, served by the mock;
``NotImplementedError`` where a service has none."""
import pytest

from lattice import (
    AnthropicBedrockClient,
    AnthropicClient,
    AnthropicVertexClient,
    AzureOpenAIResponsesClient,
    BadRequestError,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from lattice.models.base import ModelRequest
from lattice.testing import MockMessagesServer
from lattice.testing._mock_checks import count_tokens as mock_count

SYSTEM = "You are terse."
TOOLS = [{"name": "lookup", "description": "Look a word up.",
          "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}]


def request(model="claude-mock", text="how many tokens is this?", **extra):
    return ModelRequest(model=model, messages=[{"role": "user", "content": text}],
                        system=SYSTEM, tools=TOOLS, max_tokens=1000, **extra)


@pytest.fixture
def server():
    with MockMessagesServer() as mock:
        yield mock


def test_anthropic_counts_with_its_endpoint(server):
    client = AnthropicClient(api_key="sk-ant-secret", base_url=server.base_url)
    short, long = client.count_tokens(request()), client.count_tokens(request(text="x" * 4000))
    assert long > short + 900
    expected = {"model": "claude-mock", "system": SYSTEM, "tools": TOOLS,
                "messages": [{"role": "user", "content": "how many tokens is this?"}]}
    assert short == mock_count(expected)
    assert server.requests == []  # counting uses no scripted reply and sends no max_tokens


def test_anthropic_count_retries_and_maps_errors(server):
    server.strict = True
    client = AnthropicClient(api_key="k", base_url=server.base_url, max_retries=0)
    with pytest.raises(BadRequestError, match="messages"):
        client.count_tokens(ModelRequest(model="m", messages=[]))


def test_bedrock_counts_with_count_tokens(server):
    client = AnthropicBedrockClient(base_url=server.base_url, region="us-east-1",
                                    access_key_id="mock-access-key-id",
                                    secret_access_key="mock-secret-access-key")
    model = "anthropic.claude-haiku-4-5-20251001-v1:0"
    n = client.count_tokens(request(model=model))
    assert n > 10 and client.count_tokens(request(model=model, text="y" * 4000)) > n + 900
    wrong = AnthropicBedrockClient(base_url=server.base_url, region="us-east-1",
                                   access_key_id="mock-access-key-id",
                                   secret_access_key="wrong", max_retries=0)
    with pytest.raises(Exception, match="signature"):
        wrong.count_tokens(request(model=model))


def test_vertex_counts_with_count_tokens_raw_predict(server):
    server.vertex_token = "ya29.token"
    client = AnthropicVertexClient(base_url=server.base_url, project_id="p",
                                   region="us-east5", access_token="ya29.token")
    n = client.count_tokens(request(model="claude-haiku-4-5@20251001"))
    assert n == mock_count({"system": SYSTEM, "tools": TOOLS, "messages": [
        {"role": "user", "content": "how many tokens is this?"}]})


def test_responses_counts_with_input_tokens(server):
    client = OpenAIResponsesClient(api_key="sk-secret", base_url=server.base_url + "/v1")
    short = client.count_tokens(request(model="gpt-mock", extra={"temperature": 0.2}))
    assert short > 10
    assert client.count_tokens(request(model="gpt-mock", text="z" * 4000)) > short + 900


def test_clients_without_an_endpoint_raise_not_implemented(server):
    chat = OpenAIChatClient(api_key="k", base_url=server.base_url)
    with pytest.raises(NotImplementedError, match="OpenAIChatClient"):
        chat.count_tokens(request())
    azure = AzureOpenAIResponsesClient(endpoint=server.base_url, api_key="k")
    with pytest.raises(NotImplementedError, match="Azure"):
        azure.count_tokens(request())
