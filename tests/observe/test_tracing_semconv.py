"""OpenTelemetry to the letter (SPEC 21b): spans carry ``server.address``/``server.port``
(the model client's host), ``gen_ai.agent.name`` (the Agent's ``name``) and
``gen_ai.agent.id``, ``gen_ai.conversation.id`` (the store's session id, else the run
id) and ``gen_ai.tool.description``; output messages' ``finish_reason`` is one of the
conventions' values. A real Agent against the mock server over HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from helpers import echo_tool, reply, tool_use

from lattice import Agent, AnthropicClient, JsonlHistoryStore, define_history_store
from lattice.testing import MockMessagesServer

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace",
                                reason="needs opentelemetry-sdk (test extra)")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from lattice.observe.tracing import OtelObserver  # noqa: E402

CONVENTIONS_FINISH = {"stop", "length", "content_filter", "tool_call", "error"}


def traced() -> Tuple[InMemorySpanExporter, OtelObserver]:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, OtelObserver(tracer_provider=provider, trace_content=True)


def by_kind(exporter: InMemorySpanExporter) -> Dict[str, List[Any]]:
    out: Dict[str, List[Any]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.attributes["gen_ai.operation.name"], []).append(span)
    return out


def test_a_named_agent_with_a_store_over_http(tmp_path: Path) -> None:
    exporter, observer = traced()
    store = JsonlHistoryStore(str(tmp_path / "s.jsonl"))
    with MockMessagesServer([reply(tool_use("echo", id="t1")), "done", "again"]) as server:
        agent = Agent(model="claude-x", name="support-bot", history_store=store,
                      model_client=AnthropicClient("k" * 20, base_url=server.base_url),
                      tools=[echo_tool()], observers=[observer])
        agent.prompt("go")
        agent.prompt("more")
        port = int(server.base_url.rsplit(":", 1)[1])
    spans = by_kind(exporter)
    roots, chats, tools = spans["invoke_agent"], spans["chat"], spans["execute_tool"]
    assert len(roots) == 2 and len(chats) == 3 and len(tools) == 1
    for root in roots:
        assert root.name == "invoke_agent support-bot"
        assert root.attributes["gen_ai.agent.name"] == "support-bot"
    ids = {root.attributes["gen_ai.agent.id"] for root in roots}
    assert len(ids) == 1 and all(ids)  # one agent, one id
    for span in roots + chats + tools:
        assert span.attributes["gen_ai.conversation.id"] == store.session_id
    for span in roots + chats:
        assert span.attributes["server.address"] == "127.0.0.1"
        assert span.attributes["server.port"] == port
    assert tools[0].attributes["gen_ai.tool.description"] == "Echo."
    finishes = [json.loads(s.attributes["gen_ai.output.messages"])[0]["finish_reason"]
                for s in chats + roots]
    assert set(finishes) <= CONVENTIONS_FINISH and "tool_call" in finishes


def test_without_a_store_the_conversation_is_the_run() -> None:
    exporter, observer = traced()
    runs: Dict[str, Dict[str, Any]] = {}
    store = define_history_store(  # a store of the user's: no session id
        load_run=runs.get, save_run=lambda r: runs.__setitem__(r["run_id"], r),
        list_runs=lambda *a, **k: list(runs.values()))
    with MockMessagesServer(["done"]) as server:
        agent = Agent(model="claude-x", observers=[observer], history_store=store,
                      model_client=AnthropicClient("k" * 20,
                                                   base_url=server.base_url + "/"))
        agent.prompt("go", run_id="run-42")
    root = by_kind(exporter)["invoke_agent"][0]
    assert root.attributes["gen_ai.conversation.id"] == "run-42"
    assert root.name == "invoke_agent" and "gen_ai.agent.name" not in root.attributes
    assert root.attributes["gen_ai.agent.id"]


def test_an_unnamed_agent_without_a_store_has_no_conversation_id() -> None:
    exporter, observer = traced()
    with MockMessagesServer(["done"]) as server:
        Agent(model="claude-x", observers=[observer],
              model_client=AnthropicClient("k" * 20, base_url=server.base_url)).prompt("go")
    root = by_kind(exporter)["invoke_agent"][0]
    assert "gen_ai.conversation.id" not in root.attributes


@pytest.mark.parametrize("name", ["", "  ", 5, "a\nb", b"bot"])
def test_the_name_option_is_checked(name: Any) -> None:
    with pytest.raises(ValueError, match="name"):
        Agent(model="m", name=name)


def test_the_name_is_kept() -> None:
    assert Agent(model="m", name="bot").name == "bot"
    assert Agent(model="m").name is None


def test_an_observer_of_ones_own_reads_the_details_in_query_start() -> None:
    from lattice.observe import Observer, query_details
    from lattice.testing import ScriptedModelClient

    seen: List[Any] = []

    class Watcher(Observer):
        def query_start(self, model: Any, prompt: Any) -> Any:
            seen.append(query_details())

    agent = Agent(model="m", name="helper", model_client=ScriptedModelClient(["hi"]),
                  observers=[Watcher()])
    agent.prompt("go")
    assert seen[0].agent_name == "helper" and seen[0].agent_id
    assert query_details() is None  # only during query_start
