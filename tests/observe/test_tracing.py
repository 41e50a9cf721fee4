"""``OtelObserver``: the spans and GenAI attributes of SPEC 15, checked with the OpenTelemetry
SDK's in-memory exporter. The observer is driven the way the loop drives it: the query
from the caller's thread, model requests and tool calls from worker threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from lattice.errors import AbortError, MaxTurnsExceededError, OverloadedError
from lattice.messages import ResultMessage, tool_result
from lattice.models.base import ModelRequest
from lattice.observe.tracing import OtelObserver, tracing_enabled, tracing_observer
from lattice.usage import Usage

pytest.importorskip("opentelemetry.trace", reason="needs opentelemetry-api (extra otel)")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace",
                                reason="needs opentelemetry-sdk (test extra)")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-trace-1"
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


def provider_for(exporter: InMemorySpanExporter) -> Any:
    # Our own provider: the global one can be set only once per process.
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def make_observer(exporter: InMemorySpanExporter, trace_content: bool = False) -> OtelObserver:
    return OtelObserver(trace_content=trace_content, tracer_provider=provider_for(exporter))


def in_thread(fn: Any, *args: Any) -> Any:
    """Run ``fn`` in another thread (where the caller's OTel context is not current)."""
    out: List[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn(*args)))
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    return out[0]


def request(messages: Optional[List[Dict[str, Any]]] = None) -> ModelRequest:
    return ModelRequest(model=MODEL, messages=messages or [{"role": "user", "content": "hi"}],
                        system="Be brief.", tools=[], max_tokens=512)


def reply(content: List[Dict[str, Any]], stop: str, rid: str,
          usage: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    return {"role": "assistant", "content": content, "stop_reason": stop,
            "model": MODEL + "-20250101", "provider_response_id": rid,
            "usage": usage or {"input_tokens": 20, "output_tokens": 7}}


def call(name: str, call_id: str, **input: Any) -> SimpleNamespace:
    return SimpleNamespace(id=call_id, name=name, input=input)


def spans_by_name(exporter: InMemorySpanExporter) -> Dict[str, List[Any]]:
    out: Dict[str, List[Any]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def run_tool_loop(observer: OtelObserver) -> None:
    """Two model requests around one tool call, as a successful query makes them."""
    q = observer.query_start(MODEL, "What is in /etc/hosts?")

    def model(messages: List[Dict[str, Any]], answer: Dict[str, Any]) -> None:
        token = observer.model_start(q, request(messages))
        observer.model_end(token, answer, None)

    first = [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "/h"}}]
    in_thread(model, [{"role": "user", "content": "What is in /etc/hosts?"}],
              reply(first, "tool_use", "msg_1",
                    {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 90,
                     "cache_creation_input_tokens": 3}))
    tool = in_thread(observer.tool_start, q, call("read", "toolu_1", path="/h"))
    in_thread(observer.tool_end, tool, tool_result("toolu_1", "127.0.0.1 localhost"), None)
    in_thread(model, [], reply([{"type": "text", "text": "Just localhost."}], "end_turn",
                               "msg_2"))
    observer.query_end(q, ResultMessage(
        "success", result="Just localhost.", stop_reason="end_turn", num_turns=2,
        usage=Usage(30, 12, 3, 90)), None)


def test_a_tool_loop(exporter: InMemorySpanExporter) -> None:
    run_tool_loop(make_observer(exporter))
    spans = spans_by_name(exporter)
    assert sorted(spans) == [f"chat {MODEL}", "execute_tool read", "invoke_agent"]
    (root,), chats, (tool,) = (spans["invoke_agent"], spans[f"chat {MODEL}"],
                               spans["execute_tool read"])
    assert len(chats) == 2 and root.parent is None
    for child in (*chats, tool):  # children of invoke_agent, though made in other threads
        assert child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id
        assert child.status.status_code is StatusCode.UNSET
    assert dict(root.attributes) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": MODEL,
        "lattice.result.subtype": "success", "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 123, "gen_ai.usage.output_tokens": 12,
        "gen_ai.usage.cache_read.input_tokens": 90,
        "gen_ai.usage.cache_creation.input_tokens": 3}
    assert root.status.status_code is StatusCode.UNSET
    assert dict(chats[0].attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": 512, "gen_ai.response.model": MODEL + "-20250101",
        "gen_ai.response.id": "msg_1", "gen_ai.response.finish_reasons": ("tool_use",),
        "gen_ai.usage.input_tokens": 103, "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 90,
        "gen_ai.usage.cache_creation.input_tokens": 3}
    assert chats[1].attributes["gen_ai.response.id"] == "msg_2"
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read",
        "gen_ai.tool.call.id": "toolu_1", "gen_ai.tool.type": "function"}
    # Order in time: chat, tool, chat, all inside the query.
    assert root.start_time <= chats[0].start_time <= chats[0].end_time <= tool.start_time
    assert tool.end_time <= chats[1].start_time <= chats[1].end_time <= root.end_time


def test_content_only_with_trace_content(exporter: InMemorySpanExporter) -> None:
    run_tool_loop(make_observer(exporter))
    for span in exporter.get_finished_spans():
        assert not CONTENT_KEYS & set(span.attributes), span.name
    exporter.clear()

    run_tool_loop(make_observer(exporter, trace_content=True))
    spans = spans_by_name(exporter)
    root, chat, tool = (spans["invoke_agent"][0], spans[f"chat {MODEL}"][0],
                        spans["execute_tool read"][0])
    # The conventions' schemas: role + parts (tests/observe/test_tracing_content.py says more).
    assert json.loads(root.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is in /etc/hosts?"}]}]
    assert json.loads(root.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Just localhost."}],
         "finish_reason": "stop"}]  # the conventions' value for end_turn (SPEC 21b)
    assert json.loads(chat.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be brief."}]
    assert json.loads(chat.attributes["gen_ai.input.messages"])[0]["role"] == "user"
    assert json.loads(chat.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "finish_reason": "tool_call", "parts": [
            {"type": "tool_call", "id": "toolu_1", "name": "read",
             "arguments": {"path": "/h"}}]}]
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"path": "/h"}
    assert tool.attributes["gen_ai.tool.call.result"] == "127.0.0.1 localhost"


def test_a_parallel_batch_has_concurrent_tool_spans(exporter: InMemorySpanExporter) -> None:
    observer = make_observer(exporter)
    q = observer.query_start(MODEL, "go")
    started = threading.Barrier(4, timeout=10)

    def run(n: int) -> None:
        token = observer.tool_start(q, call("fetch", f"toolu_{n}", n=n))
        started.wait()  # every call has started before any ends
        observer.tool_end(token, tool_result(f"toolu_{n}", f"page {n}",
                                             is_error=(n == 2)), None)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    observer.query_end(q, ResultMessage("success", result="done"), None)

    spans = spans_by_name(exporter)
    tools = spans["execute_tool fetch"]
    root = spans["invoke_agent"][0]
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in tools) == [
        f"toolu_{n}" for n in range(4)]
    assert all(s.parent.span_id == root.context.span_id for s in tools)
    assert max(s.start_time for s in tools) <= min(s.end_time for s in tools)  # overlapping
    failed = [s for s in tools if s.status.status_code is StatusCode.ERROR]
    assert [s.attributes["gen_ai.tool.call.id"] for s in failed] == ["toolu_2"]
    assert failed[0].attributes["error.type"] == "tool_error"


def test_an_aborted_query_ends_every_span_with_its_error(exporter: InMemorySpanExporter) -> None:
    observer = make_observer(exporter)
    q = observer.query_start(MODEL, "a long job")
    tool = in_thread(observer.tool_start, q, call("sleep", "toolu_9", seconds=60))
    chat = in_thread(observer.model_start, q, request())
    abort = AbortError("aborted by the user")
    in_thread(observer.model_end, chat, None, abort)
    observer.query_end(q, ResultMessage("error_abort", is_error=True, error=abort), abort)
    # The tool noticed the abort later, in its own thread, after the query had ended.
    in_thread(observer.tool_end, tool, tool_result("toolu_9", "stopped", is_error=True), abort)

    spans = spans_by_name(exporter)
    assert sorted(spans) == [f"chat {MODEL}", "execute_tool sleep", "invoke_agent"]
    for name in spans:
        span = spans[name][0]
        assert span.end_time is not None
        assert span.status.status_code is StatusCode.ERROR, name
        assert span.attributes["error.type"] == "AbortError", name
        assert span.status.description == "aborted by the user"
        assert [e.name for e in span.events] == ["exception"]
    assert spans["invoke_agent"][0].attributes["lattice.result.subtype"] == "error_abort"


def test_a_failed_request(exporter: InMemorySpanExporter) -> None:
    observer = make_observer(exporter)
    q = observer.query_start(MODEL, "hello")
    chat = in_thread(observer.model_start, q, request())
    error = OverloadedError("Overloaded", status_code=529, request_id="req_1")
    in_thread(observer.model_end, chat, None, error)
    observer.query_end(q, None, error)  # the error escaped the query: no result

    spans = spans_by_name(exporter)
    chat_span, root = spans[f"chat {MODEL}"][0], spans["invoke_agent"][0]
    for span in (chat_span, root):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"] == "OverloadedError"
        exception = span.events[0]
        assert exception.attributes["exception.type"].endswith("OverloadedError")
    assert "gen_ai.response.id" not in chat_span.attributes
    assert "lattice.result.subtype" not in root.attributes


@pytest.mark.parametrize("result, error_type", [
    (ResultMessage("error_max_turns", is_error=True,
                   error=MaxTurnsExceededError("reached max_turns=2")), "MaxTurnsExceededError"),
    (ResultMessage("error_max_output_retries", is_error=True), "error_max_output_retries"),
    (ResultMessage("interrupted", result="partial"), None),
])
def test_error_subtypes_mark_invoke_agent(exporter: InMemorySpanExporter,
                                          result: ResultMessage,
                                          error_type: Optional[str]) -> None:
    observer = make_observer(exporter)
    observer.query_end(observer.query_start(MODEL, "x"), result, result.error)
    (root,) = exporter.get_finished_spans()
    assert root.attributes.get("error.type") == error_type
    assert (root.status.status_code is StatusCode.ERROR) == (error_type is not None)


def test_the_callers_current_span_is_the_parent(exporter: InMemorySpanExporter) -> None:
    provider = provider_for(exporter)
    observer = OtelObserver(tracer_provider=provider)
    with provider.get_tracer("app").start_as_current_span("http request") as outer:
        q = observer.query_start(MODEL, "x")
    observer.query_end(q, ResultMessage("success"), None)
    root = spans_by_name(exporter)["invoke_agent"][0]
    assert root.parent.span_id == outer.get_span_context().span_id


def test_a_span_without_a_model_or_query(exporter: InMemorySpanExporter) -> None:
    """A request made outside a query (no query token) and without a model still traces."""
    observer = make_observer(exporter)
    token = observer.model_start(None, ModelRequest(model=None, messages=[]))
    observer.model_end(token, {"content": [], "usage": None}, None)
    (span,) = exporter.get_finished_spans()
    assert span.name == "chat" and span.parent is None
    assert span.attributes["gen_ai.usage.input_tokens"] == 0
    observer.model_end(None, None, None)  # a token it did not make: ignored
    observer.tool_end("junk", None, None)
    observer.query_end(object(), None, None)


# -- turning tracing on and off -------------------------------------------------------------

def test_tracing_observer_on_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LATTICE_TRACING", raising=False)
    assert tracing_observer(False) is None and not tracing_enabled(False)
    observer = tracing_observer(True, trace_content=True)
    assert isinstance(observer, OtelObserver) and observer.trace_content
    for value in ("1", "true", "ON"):
        monkeypatch.setenv("LATTICE_TRACING", value)
        assert isinstance(tracing_observer(False), OtelObserver)
    monkeypatch.setenv("LATTICE_TRACING", "0")
    assert tracing_observer(False) is None
    with pytest.raises(ValueError, match="trace_content must be a bool, got 'yes'"):
        OtelObserver(trace_content="yes")  # type: ignore[arg-type]


def test_without_opentelemetry_tracing_is_quietly_off(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import now raises ImportError
    with caplog.at_level("INFO", logger="lattice"):
        assert tracing_observer(True) is None
    assert "opentelemetry-api is not installed" in caplog.text
    with pytest.raises(ImportError):
        OtelObserver()


def python(code: str, **env: str) -> Tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if k != "LATTICE_TRACING"}
    environ.update(env, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_tracing_off_imports_no_opentelemetry() -> None:
    code, out = python(
        "import sys, lattice, lattice.observe.observer\n"
        "from lattice.observe.tracing import tracing_observer\n"
        "assert tracing_observer(False, True) is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    assert code == 0 and out.strip() == "[]", out


def test_tracing_on_without_the_package_is_not_an_error() -> None:
    code, out = python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from lattice.observe.tracing import tracing_observer\n"
        "print(tracing_observer(False))\n", LATTICE_TRACING="1")
    assert code == 0 and out.strip() == "None", out
