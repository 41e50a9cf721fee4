"""SPEC 22, what flows down (signal, interrupt, token budget) and up (usage split by model,
the child's messages with ``parent_tool_use_id``, nested traces)."""

import threading
import time

import pytest
from helpers import QUICK, WAIT_S, reply, tool_use

from lattice import (
    AbortController,
    AbortSignal,
    Agent,
    AssistantMessage,
    ResultMessage,
    Usage,
    UserMessage,
)
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed


def delegate(name="helper", id="d1", prompt="work"):
    return tool_use(name, {"prompt": prompt}, id=id)


def usage(i, o):
    return {"input_tokens": i, "output_tokens": o}


def blocking_child(seen):
    """A child whose model call blocks until its request's signal fires; ``seen`` gets
    ``("start", t)`` then ``("signal", t)``."""
    entered = threading.Event()

    def model(request):
        seen.append(("start", time.monotonic()))
        entered.set()
        request.signal.wait(WAIT_S)
        seen.append(("signal", time.monotonic()))
        return "too late"

    child = Agent(model="child-model", name="helper", system="Help.",
                  model_client=FunctionModelClient(model))
    return child, entered


# -- down ----------------------------------------------------------------------------------------

def test_an_abort_of_the_parent_ends_a_blocked_child_within_100_ms():
    seen = []
    child, entered = blocking_child(seen)
    parent = Agent(model="parent-model", model_client=ScriptedModelClient([reply(delegate())]),
                   tools=[child.as_tool()])
    controller = AbortController()
    threading.Thread(target=lambda: (entered.wait(WAIT_S), controller.abort()),
                     daemon=True).start()
    t0 = time.monotonic()
    result = parent.prompt("go", signal=controller.signal)
    assert result.subtype == "error_abort"
    assert time.monotonic() - t0 < WAIT_S / 2
    deadline = time.monotonic() + QUICK
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [k for k, _ in seen] == ["start", "signal"]
    assert_well_formed(parent.get_history())


def test_a_timeout_signal_of_the_parent_is_an_abort_and_reaches_the_child():
    seen = []
    child, entered = blocking_child(seen)
    parent = Agent(model="parent-model", model_client=ScriptedModelClient([reply(delegate())]),
                   tools=[child.as_tool()])
    result = parent.prompt("go", signal=AbortSignal.timeout(200))
    assert result.subtype == "error_abort"
    deadline = time.monotonic() + QUICK
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [k for k, _ in seen] == ["start", "signal"]
    assert seen[1][1] - seen[0][1] < 0.2 + 0.1 + QUICK  # the fired signal, within 100 ms


def test_interrupting_the_parent_interrupts_the_child():
    seen = []
    child, entered = blocking_child(seen)
    parent = Agent(model="parent-model",
                   model_client=ScriptedModelClient([reply(delegate())]),
                   tools=[child.as_tool()])
    threading.Thread(target=lambda: (entered.wait(WAIT_S), parent.interrupt()),
                     daemon=True).start()
    result = parent.prompt("go")
    assert result.subtype == "interrupted"
    history = parent.get_history()
    assert_well_formed(history)
    block = history[-1]["content"][0]
    assert block["tool_use_id"] == "d1" and block.get("is_error")
    assert "interrupted" in block["content"]


def a_busy_child(each):
    """A "helper" child whose every reply calls a tool, each using ``each``: it stops only
    when a budget stops it; returns (its client, the child)."""
    child_client = ScriptedModelClient([
        reply(tool_use("noop", id=f"n{i}"), usage=each) for i in range(5)])

    def noop() -> str:
        """Nothing."""
        return "ok"

    child = Agent(model="child-model", name="helper", system="Help.",
                  model_client=child_client, tools=[noop])
    return child_client, child


def test_the_parents_token_budget_covers_the_childs_requests():
    child_client, child = a_busy_child(usage(40, 10))
    parent = Agent(model="parent-model", tools=[child.as_tool()], max_budget_tokens=120,
                   model_client=ScriptedModelClient([reply(delegate(), usage=usage(10, 10)),
                                                     "never"]))
    result = parent.prompt("go")
    # parent 20, then the child's requests: 50 each; the third one would start at 120
    assert child_client.calls == 2
    assert result.subtype == "error_max_budget"
    assert result.usage.input_tokens + result.usage.output_tokens == 120


def test_the_parents_max_cost_usd_covers_the_childs_requests():
    child_client, child = a_busy_child(usage(1000, 0))
    per_1000 = {"input": 1000.0, "output": 0.0}  # $1 per 1000 input tokens
    parent = Agent(model="parent-model", tools=[child.as_tool()], max_cost_usd=2.5,
                   prices={"parent-model": per_1000, "child-model": per_1000},
                   model_client=ScriptedModelClient([reply(delegate(), usage=usage(1000, 0)),
                                                     "never"]))
    result = parent.prompt("go")
    # parent $1, then the child's requests, $1 each: the third would start at $3 >= $2.5
    assert child_client.calls == 2
    assert result.subtype == "error_max_budget"
    assert result.usage.input_tokens == 3000


def test_max_turns_is_per_agent():
    child_client = ScriptedModelClient([reply(tool_use("noop", id=f"n{i}")) for i in range(3)]
                                       + ["child done"])

    def noop() -> str:
        """Nothing."""
        return "ok"

    child = Agent(model="c", name="helper", system="Help.", model_client=child_client,
                  tools=[noop], max_turns=10)
    parent = Agent(model="p", tools=[child.as_tool()], max_turns=2,
                   model_client=ScriptedModelClient([reply(delegate()), "parent done"]))
    result = parent.prompt("go")
    assert result.subtype == "success" and result.num_turns == 2
    assert child_client.calls == 4


# -- up ------------------------------------------------------------------------------------------

def two_level(**parent_options):
    child_client = ScriptedModelClient([
        reply(tool_use("noop", id="n1"), usage=usage(100, 5), model="cheap-2"),
        reply("child answer", usage=usage(120, 7), model="cheap-2")])

    def noop() -> str:
        """Nothing."""
        return "ok"

    child = Agent(model="cheap", name="helper", system="Help.", model_client=child_client,
                  tools=[noop])
    parent = Agent(model="big", name="boss", tools=[child.as_tool()],
                   model_client=ScriptedModelClient([
                       reply(delegate(), usage=usage(10, 1), model="big-1"),
                       reply("parent answer", usage=usage(20, 2))]), **parent_options)
    return parent, child


def test_usage_includes_the_child_and_by_model_splits_it():
    parent, _ = two_level()
    result = parent.prompt("go")
    assert result.usage == Usage(10 + 20 + 100 + 120, 1 + 2 + 5 + 7)
    assert result.usage.by_model == {"big-1": Usage(10, 1), "big": Usage(20, 2),
                                     "cheap-2": Usage(220, 12)}
    assert result.num_turns == 2  # the parent's own requests only


def test_by_model_of_a_plain_query_names_its_model():
    agent = Agent(model="m", model_client=ScriptedModelClient([reply("x", usage=usage(3, 4))]))
    assert agent.prompt("go").usage.by_model == {"m": Usage(3, 4)}


def test_include_subagent_messages_yields_the_childs_messages_with_parent_tool_use_id():
    parent, _ = two_level()
    items = list(parent.query("go", include_subagent_messages=True))
    kinds = [(type(m).__name__, m.parent_tool_use_id) for m in items]
    assert kinds == [("AssistantMessage", None),
                     ("AssistantMessage", "d1"), ("UserMessage", "d1"),
                     ("AssistantMessage", "d1"),
                     ("UserMessage", None), ("AssistantMessage", None),
                     ("ResultMessage", None)]
    assert items[3].text == "child answer"
    assert not any(isinstance(m, ResultMessage) and m.parent_tool_use_id for m in items)


def test_without_the_option_only_the_parents_messages_are_yielded():
    parent, _ = two_level()
    items = list(parent.query("go"))
    assert [type(m).__name__ for m in items] == [
        "AssistantMessage", "UserMessage", "AssistantMessage", "ResultMessage"]
    assert all(m.parent_tool_use_id is None for m in items)


def test_nested_messages_keep_the_id_of_the_call_that_ran_their_agent():
    inner = Agent(model="i", name="inner", system="Inner.",
                  model_client=ScriptedModelClient(["deep"]))
    middle = Agent(model="m", name="middle", system="Middle.", tools=[inner.as_tool()],
                   model_client=ScriptedModelClient([reply(delegate("inner", id="m1")),
                                                     "mid"]))
    parent = Agent(model="p", tools=[middle.as_tool()],
                   model_client=ScriptedModelClient([reply(delegate("middle", id="p1")),
                                                     "top"]))
    items = list(parent.query("go", include_subagent_messages=True))
    ids = [(type(m).__name__, m.parent_tool_use_id) for m in items]
    assert ("AssistantMessage", "m1") in ids and ("UserMessage", "p1") in ids
    deep = [m for m in items if isinstance(m, AssistantMessage) and m.text == "deep"]
    assert deep[0].parent_tool_use_id == "m1"
    assert isinstance(items[-2], AssistantMessage) and items[-2].text == "top"
    assert isinstance(items[-3], UserMessage) and items[-3].parent_tool_use_id is None


def test_include_subagent_messages_must_be_a_bool():
    parent, _ = two_level()
    with pytest.raises(ValueError, match="include_subagent_messages"):
        parent.query("go", include_subagent_messages="yes")


# -- traces ----------------------------------------------------------------------------------------

def test_the_childs_invoke_agent_span_is_a_child_of_the_parents_execute_tool_span():
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lattice.observe.tracing import OtelObserver

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    parent, child = two_level(observers=[OtelObserver(tracer_provider=provider)])
    parent.prompt("go")  # the child has no tracing option: it traces because its parent does
    spans = exporter.get_finished_spans()
    invokes = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(invokes) == 2
    top = next(s for s in invokes if s.parent is None)
    inner = next(s for s in invokes if s.parent is not None)
    assert top.attributes["gen_ai.agent.name"] == "boss"
    assert inner.attributes["gen_ai.agent.name"] == "helper"
    by_id = {s.context.span_id: s for s in spans}
    tool_span = by_id[inner.parent.span_id]
    assert tool_span.name == "execute_tool helper"
    assert tool_span.parent.span_id == top.context.span_id
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert sum(1 for s in chats if s.parent.span_id == inner.context.span_id) == 2
    assert sum(1 for s in chats if s.parent.span_id == top.context.span_id) == 2
    noop = next(s for s in spans if s.name == "execute_tool noop")
    assert noop.parent.span_id == inner.context.span_id
    # every span names the agent it belongs to
    assert noop.attributes["gen_ai.agent.name"] == "helper"
    assert tool_span.attributes["gen_ai.agent.name"] == "boss"
    assert {s.attributes["gen_ai.agent.name"] for s in chats
            if s.parent.span_id == inner.context.span_id} == {"helper"}


class _OtherProvider(ScriptedModelClient):
    provider_name = "openai"  # the child talks to another provider than its parent


def test_the_childs_spans_name_the_childs_own_provider():
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lattice.observe.tracing import OtelObserver

    exporter = InMemorySpanExporter()
    tracer_provider = sdk_trace.TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    child = Agent(model="cheap", name="helper", system="Help.",
                  model_client=_OtherProvider([reply("child answer", stop_reason="max_tokens")]))
    parent = Agent(model="big", name="boss", tools=[child.as_tool()],
                   observers=[OtelObserver(tracer_provider=tracer_provider,
                                           provider_name="anthropic")],
                   model_client=ScriptedModelClient([reply(delegate()), "parent answer"]))
    assert parent.prompt("go").subtype == "success"
    spans = exporter.get_finished_spans()
    inner = next(s for s in spans if s.name == "invoke_agent helper")
    top = next(s for s in spans if s.name == "invoke_agent boss")
    assert inner.attributes["gen_ai.provider.name"] == "openai"
    assert top.attributes["gen_ai.provider.name"] == "anthropic"
    chats = [s for s in spans if s.name.startswith("chat ")]
    child_chat = next(s for s in chats if s.parent.span_id == inner.context.span_id)
    assert child_chat.attributes["gen_ai.provider.name"] == "openai"
    # the finish reason in the child's provider's own words (OpenAI: "length")
    assert child_chat.attributes["gen_ai.response.finish_reasons"] == ("length",)
    assert {s.attributes["gen_ai.provider.name"] for s in chats
            if s.parent.span_id == top.context.span_id} == {"anthropic"}
