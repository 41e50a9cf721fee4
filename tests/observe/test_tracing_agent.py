"""OtelObserver through real Agent queries (SPEC 15): one invoke_agent span per query
with chat and tool children, errors on aborted and failed queries."""

from __future__ import annotations

import pytest
from helpers import echo_tool, reply, tool_use

from lattice import AbortController, Agent, OverloadedError
from lattice.testing import ScriptedModelClient

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace",
                                reason="needs opentelemetry-sdk (test extra)")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from lattice.observe.tracing import OtelObserver  # noqa: E402


def traced(**options):
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = OtelObserver(tracer_provider=provider)
    return exporter, observer


@pytest.mark.parametrize("parallel", [False, True])
def test_a_tool_loop_is_one_invoke_agent_span_with_chat_and_tool_children(parallel):
    exporter, observer = traced()
    client = ScriptedModelClient([reply(tool_use("echo", id="1"), tool_use("echo", id="2"),
                                        usage={"input_tokens": 5, "output_tokens": 2}),
                                  "done"])
    agent = Agent(model="claude-x", model_client=client, tools=[echo_tool()],
                  parallel_tool_calls=parallel, observers=[observer])
    agent.prompt("go")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["chat claude-x", "chat claude-x", "execute_tool echo",
                     "execute_tool echo", "invoke_agent"]
    root = spans["invoke_agent"]
    for span in exporter.get_finished_spans():
        if span is not root:
            assert span.parent.span_id == root.context.span_id
    tool_span = spans["execute_tool echo"]
    assert tool_span.attributes["gen_ai.tool.name"] == "echo"
    assert "error.type" not in root.attributes


def test_an_aborted_query_and_a_failed_request_end_their_spans_with_error_type():
    exporter, observer = traced()
    controller = AbortController()

    def model(request):
        controller.abort()
        request.signal.wait(5)
        raise AssertionError("not reached")

    agent = Agent(model="m", model_client=model, observers=[observer])
    assert agent.prompt("go", signal=controller.signal).subtype == "error_abort"

    def failing(request):
        raise OverloadedError("busy", status_code=529)

    with pytest.raises(OverloadedError):
        Agent(model="m", model_client=failing, observers=[observer]).prompt("go")
    roots = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent"]
    assert len(roots) == 2
    assert [r.attributes.get("error.type") for r in roots][1] == "OverloadedError"
    assert roots[0].attributes.get("error.type")


def test_tracing_option_without_opentelemetry_configured_is_not_an_error():
    agent = Agent(model="m", model_client=ScriptedModelClient(["ok"]), tracing=True)
    assert agent.prompt("go").result == "ok"
    with pytest.raises(ValueError, match="observers"):
        Agent(model="m", model_client=ScriptedModelClient([]), observers=[object()])
