"""Tracing follows the OpenTelemetry GenAI semantic conventions (SPEC 16a):
``gen_ai.provider.name`` on ``invoke_agent`` and ``chat`` spans, the provider's own finish
reasons, and content in the conventions' JSON schemas (``role`` + ``parts``; output
messages with ``finish_reason``; system instructions as parts)."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List

import pytest

from lattice import Agent, AnthropicClient, OpenAIChatClient, Tool
from lattice.observe.genai import (
    finish_reason,
    input_messages,
    output_finish_reason,
    output_messages,
    parts,
    provider_name,
    system_instructions,
)
from lattice.testing import MockMessagesServer, ScriptedModelClient

# -- the conventions' schemas, as checks (gen-ai-input-messages.json and friends) ---------

REQUIRED = {"text": {"content"}, "tool_call": {"name"}, "tool_call_response": {"response"},
            "reasoning": {"content"}, "blob": {"modality", "content"},
            "uri": {"modality", "uri"}}
OUTPUT_REQUIRED = {"tool_call": {"id", "name", "arguments"}}


def check_parts(value: Any, output: bool = False) -> None:
    assert isinstance(value, list), value
    for part in value:
        assert isinstance(part, dict) and isinstance(part.get("type"), str), part
        needed = REQUIRED.get(part["type"], set()) | (
            OUTPUT_REQUIRED.get(part["type"], set()) if output else set())
        assert needed <= set(part), (part, needed)
        if part["type"] in ("text", "reasoning"):
            assert isinstance(part["content"], str), part


def check_messages(value: Any, output: bool = False) -> None:
    assert isinstance(value, list) and value, value
    for message in value:
        assert isinstance(message.get("role"), str), message
        assert "content" not in message  # the Messages shape is not the conventions'
        check_parts(message.get("parts"), output)
        if output:
            assert isinstance(message.get("finish_reason"), str), message


# -- provider names ------------------------------------------------------------------------


def test_each_built_in_client_says_its_provider() -> None:
    from lattice.models.azure import AzureOpenAIChatClient, AzureOpenAIResponsesClient
    from lattice.models.bedrock import AnthropicBedrockClient
    from lattice.models.responses import OpenAIResponsesClient
    from lattice.models.vertex import AnthropicVertexClient

    expected = {AnthropicClient: "anthropic", OpenAIChatClient: "openai",
                OpenAIResponsesClient: "openai", AnthropicBedrockClient: "aws.bedrock",
                AnthropicVertexClient: "gcp.vertex_ai",
                AzureOpenAIChatClient: "azure.ai.openai",
                AzureOpenAIResponsesClient: "azure.ai.openai"}
    for cls, name in expected.items():
        assert provider_name(object.__new__(cls)) == name, cls
    assert provider_name(None) == "anthropic"  # the Agent's default client


def test_other_clients_say_it_or_their_class_does() -> None:
    class Local:
        provider_name = "ollama"

        def create(self, request: Any) -> Dict[str, Any]:
            return {}

    class MyOpenAIProxy:
        pass

    class HomeModel:
        pass

    assert provider_name(Local()) == "ollama"
    assert provider_name(MyOpenAIProxy()) == "openai"
    assert provider_name(HomeModel()) == "HomeModel"


def test_finish_reasons_are_the_providers_own() -> None:
    assert [finish_reason("openai", s) for s in
            ("end_turn", "tool_use", "max_tokens", "refusal", "other")] == [
        "stop", "tool_calls", "length", "content_filter", "other"]
    assert finish_reason("azure.ai.openai", "tool_use") == "tool_calls"
    for provider in ("anthropic", "aws.bedrock", "gcp.vertex_ai"):
        assert finish_reason(provider, "tool_use") == "tool_use"
    assert finish_reason("openai", None) is None


# -- content in the conventions' shapes -------------------------------------------------------

CONVERSATION: List[Dict[str, Any]] = [
    {"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Look it up.", "signature": "sig"},
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "png"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1",
         "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "logo"}]},
        {"type": "text", "text": "and?"}]},
]


def test_input_messages_are_role_and_parts() -> None:
    messages = input_messages(CONVERSATION)
    check_messages(messages)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[0]["parts"] == [
        {"type": "text", "content": "What is this?"},
        {"type": "blob", "modality": "image", "mime_type": "image/png",
         "content": "iVBORw0KGgo="},
        {"type": "uri", "modality": "image", "uri": "https://example.com/a.png"}]
    assert messages[1]["parts"] == [
        {"type": "reasoning", "content": "Look it up."},
        {"type": "tool_call", "id": "t1", "name": "lookup", "arguments": {"q": "png"}}]
    assert messages[2]["parts"] == [
        {"type": "tool_call_response", "id": "t1", "response": "a logo"}]
    assert messages[3]["parts"] == [{"type": "text", "content": "and?"}]


def test_output_messages_and_system_instructions() -> None:
    out = output_messages([{"type": "text", "text": "Hi."}], "stop")
    check_messages(out, output=True)
    assert out == [{"role": "assistant", "parts": [{"type": "text", "content": "Hi."}],
                    "finish_reason": "stop"}]
    assert [output_finish_reason(s) for s in ("end_turn", "stop_sequence", "max_tokens",
                                              "tool_use", "refusal", None, "odd")] == [
        "stop", "stop", "length", "tool_call", "content_filter", "stop", "stop"]
    assert output_finish_reason("end_turn", error=True) == "error"
    assert system_instructions("Be brief.") == [{"type": "text", "content": "Be brief."}]
    marked = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    assert system_instructions(marked) == [{"type": "text", "content": "Be brief."}]
    assert system_instructions(None) is None
    failed = parts([{"type": "tool_result", "tool_use_id": "x", "content": "no",
                     "is_error": True}])
    assert failed == [{"type": "tool_call_response", "id": "x", "response": "no",
                       "is_error": True}]
    assert parts([{"type": "server_tool_use", "id": "s", "name": "web_search"}]) == [
        {"type": "server_tool_use", "id": "s", "name": "web_search"}]  # a generic part


# -- through an Agent, against the mock server ---------------------------------------------

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace",
                                reason="needs opentelemetry-sdk (test extra)")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The global tracer provider an Agent with ``tracing=True`` uses, for this test."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    exporter.shutdown()


CALL = {"content": [{"type": "tool_use", "id": "call_1", "name": "echo",
                     "input": {"text": "hi"}}]}


def run(client: Any, model: str) -> None:
    echo = Tool("echo", "Echo.", {"type": "object"}, lambda a: "echoed: " + a["text"])
    agent = Agent(model=model, model_client=client, tools=[echo], tracing=True,
                  trace_content=True, system="Be brief.")
    assert agent.prompt("say hi").result == "done"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_spans_of_a_tool_loop(exporter: InMemorySpanExporter, kind: str) -> None:
    with MockMessagesServer([CALL, "done"]) as server:
        if kind == "openai":
            run(OpenAIChatClient("sk-mock", server.base_url + "/v1"), "gpt-mock")
            finishes = ["tool_calls", "stop"]
        else:
            run(AnthropicClient("sk-ant-mock", server.base_url), "claude-mock")
            finishes = ["tool_use", "end_turn"]
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "invoke_agent")
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time)
    for span in (root, *chats):
        assert span.attributes["gen_ai.provider.name"] == kind, span.name
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        (finishes[0],), (finishes[1],)]
    assert root.attributes["gen_ai.response.finish_reasons"] == (finishes[1],)

    first_out = json.loads(chats[0].attributes["gen_ai.output.messages"])
    check_messages(first_out, output=True)
    assert first_out[0]["finish_reason"] == "tool_call"  # the conventions' values
    assert first_out[0]["parts"] == [{"type": "tool_call", "id": "call_1", "name": "echo",
                                      "arguments": {"text": "hi"}}]
    second_in = json.loads(chats[1].attributes["gen_ai.input.messages"])
    check_messages(second_in)
    assert [m["role"] for m in second_in] == ["user", "assistant", "tool"]
    assert second_in[2]["parts"] == [{"type": "tool_call_response", "id": "call_1",
                                      "response": "echoed: hi"}]
    assert json.loads(chats[1].attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be brief."}]
    root_out = json.loads(root.attributes["gen_ai.output.messages"])
    check_messages(root_out, output=True)
    assert root_out[0]["finish_reason"] == "stop"
    check_messages(json.loads(root.attributes["gen_ai.input.messages"]))


def test_a_client_without_a_provider_name(exporter: InMemorySpanExporter) -> None:
    run(ScriptedModelClient([CALL, "done"]), "m")
    names = {s.attributes.get("gen_ai.provider.name") for s in exporter.get_finished_spans()
             if not s.name.startswith("execute_tool")}
    assert names == {"ScriptedModelClient"}
