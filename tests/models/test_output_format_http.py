"""output_format (SPEC 11) end to end over real HTTP: both clients against the mock server,
with the provider's request field checked and the final text validated by lattice."""

from __future__ import annotations

import pytest

from lattice import Agent, AnthropicClient, OpenAIChatClient
from lattice.testing import MockMessagesServer

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "temp_c": {"type": "number"}},
          "required": ["city", "temp_c"], "additionalProperties": False}


def client_for(provider, server):
    if provider == "anthropic":
        return AnthropicClient(api_key="k", base_url=server.base_url)
    return OpenAIChatClient(api_key="k", base_url=server.base_url + "/v1")


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_output_format_over_http(provider, stream):
    with MockMessagesServer(['{"city": "Paris"}', '{"city": "Paris", "temp_c": 21}']) as server:
        client = client_for(provider, server)
        client.stream = stream
        agent = Agent(model="m", model_client=client, output_format=SCHEMA)
        result = agent.prompt("Weather in Paris as JSON")
        body = server.requests[0]
    assert result.subtype == "success"
    assert result.structured_result == {"city": "Paris", "temp_c": 21}
    if provider == "anthropic":
        assert body["output_config"]["format"] == {"type": "json_schema", "schema": SCHEMA}
    else:
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
        assert fmt["json_schema"]["schema"] == SCHEMA
    # the first answer missed temp_c: the model was told so, and answered again
    feedback = agent.get_history()[2]
    assert feedback["role"] == "user" and "temp_c" in feedback["content"]
