"""Recorder / Replayer (SPEC 25): record a client's traffic (streamed too) into a JSON
cassette with secrets redacted; replay it offline in order, with a diff on a mismatch."""
import json

import pytest

from lattice import (
    Agent,
    AnthropicBedrockClient,
    AnthropicClient,
    AnthropicVertexClient,
    AzureOpenAIChatClient,
    AzureOpenAIResponsesClient,
    BadRequestError,
    GeminiClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
    VertexGeminiClient,
    tool,
)
from lattice.testing import MockMessagesServer, Recorder, Replayer, ScriptedModelClient

KEY = "sk-ant-api03-very-secret-key-0123456789"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def use_add(a, b):
    return {"content": [{"type": "tool_use", "name": "add", "input": {"a": a, "b": b}}]}


CLIENTS = {
    "anthropic": lambda url: AnthropicClient(api_key=KEY, base_url=url),
    "chat": lambda url: OpenAIChatClient(api_key="sk-proj-secret0123456789abcdef", base_url=url),
    "responses": lambda url: OpenAIResponsesClient(api_key="sk-proj-secret0123456789abcdef",
                                                   base_url=url),
    "bedrock": lambda url: AnthropicBedrockClient(
        base_url=url, region="us-east-1", access_key_id="mock-access-key-id",
        secret_access_key="mock-secret-access-key"),
    "vertex": lambda url: AnthropicVertexClient(base_url=url, project_id="p", region="us-east5",
                                                access_token="ya29.vertex-secret-token-1234"),
    "azure-chat": lambda url: AzureOpenAIChatClient(endpoint=url, api_key="azure-secret-key-12345", deployment="d",
                                                    api_version="2024-10-21"),
    "azure-responses": lambda url: AzureOpenAIResponsesClient(endpoint=url,
                                                              api_key="azure-secret-key-12345"),
    "gemini": lambda url: GeminiClient(api_key="AIzaSyMockGeminiKey0123456789abcdefghij",
                                       base_url=url),
    "vertex-gemini": lambda url: VertexGeminiClient(
        project_id="p", region="us-central1", access_token="ya29.vertex-secret-token-1234",
        base_url=url),
}
SECRETS = [KEY, "sk-proj-secret0123456789abcdef", "mock-secret-access-key",
           "ya29.vertex-secret-token-1234", "azure-secret-key-12345",
           "AIzaSyMockGeminiKey0123456789abcdefghij"]


def run(client, prompt="what is 2 + 3?", **options):
    agent = Agent(model="model-x", model_client=client, tools=[add],
                  include_partial_messages=True, **options)
    messages = list(agent.query(prompt))
    return messages, agent.get_history()


def shown(messages):
    """What a consumer saw: types, stream events, texts, the result."""
    out = []
    for m in messages:
        if m.type == "stream_event":
            out.append(("event", json.dumps(m.event, sort_keys=True)))
        elif m.type == "result":
            out.append(("result", m.subtype, m.result, m.usage.to_dict()))
        else:
            out.append((m.type,))
    return out


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_record_then_replay_every_wire_format(tmp_path, name):
    cassette = tmp_path / f"{name}.json"
    with MockMessagesServer([use_add(2, 3), "2 + 3 = 5"]) as server:
        recorded, history = run(Recorder(CLIENTS[name](server.base_url), cassette))
        assert len(server.requests) == 2
    # the server is gone: the replay is offline
    replayed, replayed_history = run(Replayer(cassette))
    assert shown(replayed) == shown(recorded)
    assert any(m.type == "stream_event" for m in replayed)
    assert replayed_history == history
    assert recorded[-1].result == "2 + 3 = 5"
    text = cassette.read_text()
    for secret in SECRETS:
        assert secret not in text
    data = json.loads(text)
    assert data["format"] == "lattice-cassette" and len(data["interactions"]) == 2
    assert data["interactions"][0]["events"]  # streamed events were recorded


def test_a_mismatch_raises_with_a_readable_diff(tmp_path):
    cassette = tmp_path / "c.json"
    run(Recorder(ScriptedModelClient(["fine"]), cassette), prompt="the recorded prompt")
    replayer = Replayer(cassette)
    agent = Agent(model="model-x", model_client=replayer, tools=[add])
    with pytest.raises(AssertionError) as info:
        agent.prompt("another prompt")
    message = str(info.value)
    assert "call 1" in message and "c.json" in message
    assert '-          "text": "the recorded prompt"' in message or \
        '"the recorded prompt"' in message
    assert "\n-" in message and "\n+" in message and "another prompt" in message


def test_model_and_max_tokens_are_compared_volatile_fields_are_not(tmp_path):
    cassette = tmp_path / "c.json"
    run(Recorder(ScriptedModelClient(["fine"]), cassette), request_timeout_ms=5000)
    messages, _ = run(Replayer(cassette), request_timeout_ms=60000)  # volatile: matches
    assert messages[-1].result == "fine"
    with pytest.raises(AssertionError, match="max_tokens"):
        run(Replayer(cassette), max_tokens=17)
    with pytest.raises(AssertionError, match="model"):
        Agent(model="model-y", model_client=Replayer(cassette), tools=[add]).prompt(
            "what is 2 + 3?")
    messages, _ = run(Replayer(cassette, match="none"), max_tokens=17)
    assert messages[-1].result == "fine"


def test_an_error_is_recorded_and_raised_again(tmp_path):
    cassette = tmp_path / "c.json"
    with MockMessagesServer([MockMessagesServer.error(400, "bad thing")]) as server:
        client = Recorder(AnthropicClient(api_key=KEY, base_url=server.base_url), cassette)
        with pytest.raises(BadRequestError):
            Agent(model="m", model_client=client).prompt("hi")
    with pytest.raises(BadRequestError, match="bad thing") as info:
        Agent(model="m", model_client=Replayer(cassette)).prompt("hi")
    assert info.value.status_code == 400


def test_running_out_and_a_bad_cassette(tmp_path):
    cassette = tmp_path / "c.json"
    run(Recorder(ScriptedModelClient(["one"]), cassette))
    replayer = Replayer(cassette)
    run(replayer)
    with pytest.raises(AssertionError, match="has 1 interactions; call 2"):
        run(replayer)
    with pytest.raises(FileNotFoundError, match="Recorder"):
        Replayer(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"something": "else"}')
    with pytest.raises(ValueError, match="not a lattice cassette"):
        Replayer(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="match"):
        Replayer(cassette, match="fuzzy")


def test_secrets_by_key_name_shape_and_environment_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "env-secret-value-42")
    cassette = tmp_path / "c.json"
    client = Recorder(ScriptedModelClient(["the key is env-secret-value-42 and "
                                           "Bearer abcdefghijklmnop123"]), cassette)
    Agent(model="m", model_client=client,
          extra={"metadata": {"api_key": "in-extra-123456"}}).prompt("hi")
    text = cassette.read_text()
    for secret in ("env-secret-value-42", "abcdefghijklmnop123", "in-extra-123456"):
        assert secret not in text
    assert "REDACTED" in text


def test_count_tokens_is_recorded_and_replayed(tmp_path):
    cassette = tmp_path / "c.json"
    from lattice.models import ModelRequest

    request = ModelRequest(model="claude-mock", messages=[{"role": "user", "content": "hi"}])
    with MockMessagesServer() as server:
        recorder = Recorder(AnthropicClient(api_key=KEY, base_url=server.base_url), cassette)
        counted = recorder.count_tokens(request)
    assert Replayer(cassette).count_tokens(request) == counted
    with pytest.raises(AssertionError, match="count_tokens"):
        Replayer(cassette).create(request)


def test_a_cassette_grows_with_the_conversation_not_its_square(tmp_path):
    from lattice import Agent, tool

    @tool
    def step(n: int) -> str:
        """Advance one step."""
        return f"step {n} done " + "x" * 200

    def script(turns):
        calls = [{"content": [{"type": "tool_use", "id": f"t{k}", "name": "step",
                               "input": {"n": k}}]} for k in range(turns)]
        return calls + ["finished"]

    sizes = {}
    for turns in (10, 40):
        cassette = tmp_path / f"{turns}.json"
        Agent(model="m", model_client=Recorder(ScriptedModelClient(script(turns)), cassette),
              tools=[step], max_turns=turns + 2).prompt("go")
        sizes[turns] = cassette.stat().st_size
        data = json.loads(cassette.read_text())
        later = data["interactions"][-1]["request"]["messages"]
        assert later["previous"] > 0 and len(later["then"]) == 2  # the turn's two messages
        replayed = Agent(model="m", model_client=Replayer(cassette), tools=[step],
                         max_turns=turns + 2).prompt("go")
        assert replayed.result == "finished"
    assert sizes[40] < 5 * sizes[10]  # linear (4x the turns), not quadratic (16x)


def test_a_broken_shortened_request_is_named(tmp_path):
    cassette = tmp_path / "c.json"
    cassette.write_text(json.dumps({"format": "lattice-cassette", "version": 1,
                                    "interactions": [{"request": {"messages": {
                                        "previous": 3, "then": []}}}]}))
    with pytest.raises(ValueError, match="call 1"):
        Replayer(cassette)


def test_the_replayer_names_the_recorded_provider(tmp_path):
    cassette = tmp_path / "c.json"
    with MockMessagesServer(["hi"]) as server:
        Agent(model="m", model_client=Recorder(
            AnthropicClient(api_key=KEY, base_url=server.base_url), cassette)).prompt("hi")
    assert Replayer(cassette).provider_name == "anthropic"
