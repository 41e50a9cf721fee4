"""A streamed reply is bounded as a whole (SPEC 21b), on every stream format.

A real local server (``endless_server.py``) sends an endless stream of small, valid
deltas: each event passes the per-line and per-event checks of ``test_bounded_input.py``,
so only the whole reply's count (``max_response_bytes``, small here) ends it. A stream
that only pings, or says nothing at all, ends after ``stream_idle_timeout_ms``.
Without the limits these calls run until their 20 s deadline (``RequestTimeoutError``).
"""

from __future__ import annotations

import base64
import gc
import itertools
import json
import time
import tracemalloc
from typing import Any, Callable, Dict, Iterator, List

import pytest
from endless_server import EndlessServer

from lattice import (
    AnthropicBedrockClient,
    AnthropicClient,
    GeminiClient,
    OpenAIChatClient,
    OpenAIResponsesClient,
)
from lattice.errors import APIConnectionError
from lattice.models.base import ModelRequest
from lattice.models.budget import ReplyBudget
from lattice.models.chat_stream import parse_chat_stream
from lattice.models.eventstream import encode_frame
from lattice.models.gemini import parse_gemini_stream
from lattice.models.sse import parse_stream

KEY = "sk-bounded-0123456789"
KiB, MiB = 1 << 10, 1 << 20
DEADLINE_MS = 20_000  # what ends these calls when the limits do not


def request() -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def sse(event: Dict[str, Any], name: str = "") -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"


def anthropic_events(delta: Callable[[int], Dict[str, Any]], block: Dict[str, Any]
                     ) -> Iterator[bytes]:
    yield sse({"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "usage": {"input_tokens": 1, "output_tokens": 0}}}, "message_start")
    yield sse({"type": "content_block_start", "index": 0, "content_block": block},
              "content_block_start")
    n = 0
    while True:
        yield sse({"type": "content_block_delta", "index": 0, "delta": delta(n)},
                  "content_block_delta")
        n += 1


def anthropic_text() -> Iterator[bytes]:
    return anthropic_events(lambda n: {"type": "text_delta", "text": "y" * 1000},
                            {"type": "text", "text": ""})


def chat_text() -> Iterator[bytes]:
    while True:
        yield sse({"id": "c1", "model": "m", "choices": [
            {"index": 0, "delta": {"content": "y" * 1000}, "finish_reason": None}]})


def responses_text() -> Iterator[bytes]:
    yield sse({"type": "response.created", "response": {"id": "r1", "model": "m"}})
    yield sse({"type": "response.output_item.added", "output_index": 0, "item": {
        "type": "message", "id": "m1", "role": "assistant", "content": []}})
    while True:
        yield sse({"type": "response.output_text.delta", "output_index": 0,
                   "content_index": 0, "item_id": "m1", "delta": "y" * 1000})


def responses_reasoning() -> Iterator[bytes]:
    yield sse({"type": "response.created", "response": {"id": "r1", "model": "m"}})
    n = 0
    while True:  # reasoning items arrive whole, one output index after another
        yield sse({"type": "response.output_item.done", "output_index": n, "item": {
            "type": "reasoning", "id": f"rs{n}", "summary": [],
            "encrypted_content": "z" * 1000}})
        n += 1


_CHUNK = {":event-type": "chunk", ":content-type": "application/json",
          ":message-type": "event"}


def bedrock_frame(event: Dict[str, Any]) -> bytes:
    data = base64.b64encode(json.dumps(event).encode())
    return encode_frame(_CHUNK, b'{"bytes":"%s"}' % data)


def bedrock_text() -> Iterator[bytes]:
    for piece in anthropic_text():
        event = json.loads(piece.split(b"data: ", 1)[1])
        yield bedrock_frame(event)


def _client(provider: str, url: str, **options: Any) -> Any:
    options.setdefault("max_retries", 0)
    options.setdefault("timeout_ms", DEADLINE_MS)
    if provider == "anthropic":
        return AnthropicClient(KEY, base_url=url, **options)
    if provider == "chat":
        return OpenAIChatClient(KEY, base_url=url + "/v1", **options)
    if provider == "responses":
        return OpenAIResponsesClient(api_key=KEY, base_url=url, **options)
    if provider == "gemini":
        return GeminiClient(api_key=KEY, base_url=url, **options)
    return AnthropicBedrockClient(region="us-east-1", access_key_id="AKIDEXAMPLE",
                                  secret_access_key="secret-0123456789", base_url=url,
                                  **options)


def gemini_text() -> Iterator[bytes]:
    while True:
        yield sse({"candidates": [{"content": {"role": "model",
                                               "parts": [{"text": "y" * 1000}]}}]})


STREAMS = {
    "gemini": ("gemini", gemini_text, "text/event-stream"),
    "anthropic": ("anthropic", anthropic_text, "text/event-stream"),
    "chat": ("chat", chat_text, "text/event-stream"),
    "responses": ("responses", responses_text, "text/event-stream"),
    "responses-reasoning": ("responses", responses_reasoning, "text/event-stream"),
    "bedrock": ("bedrock", bedrock_text, "application/vnd.amazon.eventstream"),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_an_endless_stream_of_small_deltas_ends_at_max_response_bytes(name: str) -> None:
    provider, body, kind = STREAMS[name]
    with EndlessServer("body", body=body, kind=kind) as server:
        client = _client(provider, server.url, max_response_bytes=256 * KiB)
        began = time.monotonic()
        with pytest.raises(APIConnectionError) as info:
            client.create(request())
        assert time.monotonic() - began < DEADLINE_MS / 2000
        assert ("the streamed reply is larger than max_response_bytes (262144 bytes); "
                "the response was closed") in str(info.value)
        client.close()


def _events(*deltas: Dict[str, Any]) -> List[bytes]:
    out = [sse({"type": "message_start", "message": {"id": "m", "content": [],
                                                     "usage": {}}})]
    blocks = [{"type": "text", "text": ""}, {"type": "thinking", "thinking": ""},
              {"type": "tool_use", "id": "t", "name": "f", "input": {}}]
    for index, block in enumerate(blocks):
        out.append(sse({"type": "content_block_start", "index": index,
                        "content_block": block}))
    for index, delta in enumerate(deltas):
        out.append(sse({"type": "content_block_delta", "index": index, "delta": delta}))
    out.append(sse({"type": "message_stop"}))
    return out


def test_text_thinking_and_tool_input_count_together() -> None:
    deltas = ({"type": "text_delta", "text": "a" * 400},
              {"type": "thinking_delta", "thinking": "é" * 200},  # 400 bytes in UTF-8
              {"type": "input_json_delta", "partial_json": '"' + "b" * 398 + '"'})
    for alone in deltas:  # each alone is within the limit
        assert parse_stream(_events(alone), limit=1000)["content"]
    with pytest.raises(APIConnectionError, match="the streamed reply is larger than "
                       r"max_response_bytes \(1000 bytes\)"):
        parse_stream(_events(*deltas), limit=1000)


@pytest.mark.parametrize("parse", [parse_stream, parse_chat_stream, parse_gemini_stream])
def test_the_gathered_deltas_are_released_when_the_limit_ends_the_stream(
        parse: Callable[..., Any]) -> None:
    piece = "q" * (64 * KiB)
    if parse is parse_stream:
        endless: Iterator[bytes] = anthropic_events(
            lambda n: {"type": "text_delta", "text": piece}, {"type": "text", "text": ""})
    elif parse is parse_gemini_stream:
        endless = (sse({"candidates": [{"content": {"role": "model", "parts": [
            {"text": piece, "thought": n % 2 == 0}]}}]}) for n in itertools.count())
    else:
        endless = (sse({"choices": [{"index": 0, "delta": {"content": piece}}]})
                   for _ in iter(int, 1))
    events = itertools.islice(endless, 200)  # 12.5 MiB, then the stream is cut
    tracemalloc.start()
    try:
        with pytest.raises(APIConnectionError, match="larger than max_response_bytes") as info:
            parse(events, None, 8 * MiB)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.__traceback__ is not None  # the traceback is still held here
    assert peak > 8 * MiB  # it did gather up to the limit
    assert held < 1 * MiB, f"{held} bytes still held after the error"


def test_a_budget_counts_utf8_bytes() -> None:
    budget = ReplyBudget(10)
    assert budget == 10 and budget.take("aé") == 3
    with pytest.raises(APIConnectionError):
        budget.take("€€€")  # 9 bytes: 12 in all


def anthropic_pings() -> Iterator[bytes]:
    yield sse({"type": "message_start", "message": {"id": "m", "content": [],
                                                    "usage": {}}}, "message_start")
    while True:
        time.sleep(0.05)
        yield sse({"type": "ping"}, "ping")
        yield b": keep-alive\n\n"
        yield sse({"type": "something_new", "x": 1}, "something_new")


@pytest.mark.parametrize("provider,mode", [
    ("anthropic", "pings"), ("chat", "keep-alive"), ("anthropic", "silent"),
    ("responses", "silent"), ("bedrock", "silent"), ("gemini", "keep-alive"),
])
def test_a_stream_that_sends_nothing_useful_ends_after_the_idle_limit(
        provider: str, mode: str) -> None:
    kind = "application/vnd.amazon.eventstream" if provider == "bedrock" else (
        "text/event-stream")
    server = EndlessServer("body", body=anthropic_pings) if mode == "pings" else (
        EndlessServer(mode, kind=kind))
    with server:
        client = _client(provider, server.url, stream_idle_timeout_ms=600)
        began = time.monotonic()
        with pytest.raises(APIConnectionError) as info:
            client.create(request())
        took = time.monotonic() - began
        assert ("the stream sent nothing useful for stream_idle_timeout_ms (600 ms); the "
                "response was closed") in str(info.value)
        assert 0.5 < took < DEADLINE_MS / 2000
        client.close()


@pytest.mark.parametrize("filler", [{}, {"usageMetadata": {"promptTokenCount": 3}},
                                    {"candidates": [{"content": {"role": "model"}}]}])
def test_gemini_chunks_that_add_nothing_are_not_progress(filler: Dict[str, Any]) -> None:
    def empty_chunks() -> Iterator[bytes]:
        yield sse({"responseId": "r", "candidates": [
            {"content": {"role": "model", "parts": [{"text": "a"}]}}]})
        while True:  # a gateway's keep-alive: valid chunks that move nothing on
            time.sleep(0.05)
            yield sse(filler)

    with EndlessServer("body", body=empty_chunks) as server:
        client = _client("gemini", server.url, stream_idle_timeout_ms=600)
        began = time.monotonic()
        with pytest.raises(APIConnectionError, match="nothing useful for "
                           "stream_idle_timeout_ms"):
            client.create(request())
        assert time.monotonic() - began < DEADLINE_MS / 2000
        client.close()


def test_a_slow_gemini_stream_that_progresses_is_not_idle() -> None:
    def slow() -> Iterator[bytes]:
        for text in ("o", "k", "!"):  # 0.2 s apart: 0.6 s in all, over the idle limit
            time.sleep(0.2)
            yield sse({"candidates": [{"content": {"role": "model",
                                                   "parts": [{"text": text}]}}]})
        yield sse({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
                                   "finishReason": "STOP"}]})  # and the body ends

    with EndlessServer("body", body=slow) as server:
        client = _client("gemini", server.url, stream_idle_timeout_ms=400)
        reply = client.create(request())
        assert reply["content"][0]["text"] == "ok!"
        client.close()


def test_a_slow_stream_that_progresses_is_not_idle() -> None:
    def slow() -> Iterator[bytes]:
        yield from _slowly([
            sse({"type": "message_start", "message": {"id": "m", "content": [],
                                                      "usage": {}}}),
            sse({"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}}),
            sse({"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "ok"}}),
            sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            sse({"type": "message_stop"})])

    with EndlessServer("body", body=slow) as server:
        client = _client("anthropic", server.url, stream_idle_timeout_ms=400)
        reply = client.create(request())
        assert reply["content"][0] == {"type": "text", "text": "ok"}
        client.close()


def _slowly(events: List[bytes]) -> Iterator[bytes]:
    for event in events:  # 0.2 s apart: over the idle limit in all, never between two
        time.sleep(0.2)
        yield event
    while True:  # the server keeps the body open after message_stop
        time.sleep(0.2)
        yield b": done\n\n"


@pytest.mark.parametrize("option", ["stream_idle_timeout_ms", "timeout_ms"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -1, "5", True])
def test_time_limits_are_checked(option: str, value: Any) -> None:
    for provider in ("anthropic", "chat", "responses", "bedrock"):
        with pytest.raises(ValueError, match=option):
            _client(provider, "http://127.0.0.1:9", **{option: value})


def test_the_idle_limit_may_be_turned_off() -> None:
    client = _client("anthropic", "http://127.0.0.1:9", stream_idle_timeout_ms=None)
    assert client.stream_idle_timeout_ms is None
    assert _client("chat", "http://127.0.0.1:9").stream_idle_timeout_ms == 300_000
