"""Secrets never travel in an exception chain (SPEC 21b).

A query-string secret in ``base_url`` stays out of the ``APIConnectionError`` of a refused
connection: its message, its formatted traceback, its ``__cause__``/``__context__`` (the
``requests`` exception there names the URL whole), and the OpenTelemetry span's
``exception.stacktrace``. The original exception's type name is kept in the message.
"""

from __future__ import annotations

import socket
import traceback
from typing import Any, Iterator, List

import pytest

from lattice import Agent, AnthropicClient, OpenAIChatClient
from lattice.errors import APIConnectionError
from lattice.models.base import ModelRequest
from lattice.observe.tracing import OtelObserver

SECRET = "qs-SECRET-0123456789"


def _refused_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: List[int] = []
    stack = [error]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.append(id(item))
        yield item
        stack += [e for e in (item.__cause__, item.__context__) if e is not None]


@pytest.mark.parametrize("cls", [AnthropicClient, OpenAIChatClient])
@pytest.mark.parametrize("stream", [True, False])
def test_a_refused_connection_carries_no_secret_in_its_chain(cls: Any, stream: bool) -> None:
    url = f"http://127.0.0.1:{_refused_port()}/v1?key={SECRET}"
    client = cls("sk-chain-0123456789", base_url=url, max_retries=1, stream=stream)
    request = ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(APIConnectionError) as info:
        client.create(request)
    error = info.value
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    assert SECRET not in text
    for item in _chain(error):
        assert SECRET not in str(item) and SECRET not in repr(item.args)
    assert error.__cause__ is None and error.__context__ is None
    assert "ConnectionError" in str(error)  # the original's type name, kept


def test_the_span_stacktrace_holds_no_secret() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="needs opentelemetry-sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    url = f"http://127.0.0.1:{_refused_port()}?key={SECRET}"
    observer = OtelObserver(tracer_provider=provider)
    client = AnthropicClient("sk-chain-0123456789", base_url=url, max_retries=0)
    agent = Agent(model_client=client, model="m", observers=[observer])
    with pytest.raises(APIConnectionError) as info:
        agent.prompt("hi")
    error = info.value  # as prompt() raises it, too
    assert SECRET not in "".join(traceback.format_exception(type(error), error,
                                                            error.__traceback__))
    events = [event for span in exporter.get_finished_spans() for event in span.events
              if event.name == "exception"]
    assert events, "no exception was recorded"
    for event in events:
        stacktrace = str(event.attributes.get("exception.stacktrace"))
        assert "APIConnectionError" in stacktrace
        assert SECRET not in stacktrace and SECRET not in str(event.attributes)
