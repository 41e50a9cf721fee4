"""The SSE decoder and message accumulator, fed plain lists of lines and bytes."""

from __future__ import annotations

import json
import random
import re
import time
from typing import Any, Dict, List

import pytest

from lattice.errors import (
    APIConnectionError,
    APIStatusError,
    InternalServerError,
    OverloadedError,
    RateLimitError,
)
from lattice.models.sse import (
    MessageAccumulator,
    ServerSentEvent,
    SSEDecoder,
    iter_lines,
    parse_stream,
)
from lattice.models.wire import message_events, reply_from_message


def sse(*events: Dict[str, Any], sep: str = "\n") -> bytes:
    out = ""
    for event in events:
        out += f"event: {event['type']}{sep}data: {json.dumps(event)}{sep}{sep}"
    return out.encode("utf-8")


def start(**usage: Any) -> Dict[str, Any]:
    base = {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}
    base.update(usage)
    return {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": base}}


def block_start(index: int, block: Dict[str, Any]) -> Dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **d: Any) -> Dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def stop(index: int) -> Dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def end(stop_reason: str = "end_turn", **usage: Any) -> List[Dict[str, Any]]:
    return [{"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
             "usage": usage or {"output_tokens": 5}}, {"type": "message_stop"}]


def text_stream(*pieces: str) -> List[Dict[str, Any]]:
    events = [start(), block_start(0, {"type": "text", "text": ""}), {"type": "ping"}]
    events += [delta(0, type="text_delta", text=p) for p in pieces]
    return events + [stop(0), *end()]


# -- iter_lines ---------------------------------------------------------------------


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
def test_iter_lines_every_line_ending(sep: bytes) -> None:
    data = sep.join([b"event: a", b"data: 1", b"", b"data: 2", b""]) + sep
    assert list(iter_lines([data])) == [b"event: a", b"data: 1", b"", b"data: 2", b""]


def test_iter_lines_crlf_split_between_chunks_is_one_line_end() -> None:
    assert list(iter_lines([b"data: 1\r", b"\ndata: 2\r\n"])) == [b"data: 1", b"data: 2"]
    assert list(iter_lines([b"a\r", b"\r", b"b"])) == [b"a", b"", b"b"]
    assert list(iter_lines([b"a\r"])) == [b"a"]


def test_iter_lines_any_chunking_gives_the_same_lines() -> None:
    data = "data: é — \u2028 ok\r\n\r\nevent: x\rdata: 2\n\n".encode()
    whole = list(iter_lines([data]))
    for size in range(1, 9):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert list(iter_lines(chunks)) == whole
    assert whole[0].decode() == "data: é — \u2028 ok"  # U+2028 does not split a line


def test_iter_lines_strips_a_leading_bom_and_keeps_a_last_unterminated_line() -> None:
    assert list(iter_lines([b"\xef\xbb\xbfdata: 1\n", b"", b"data: 2"])) == [b"data: 1", b"data: 2"]


def test_iter_lines_yields_a_cr_ended_line_without_waiting_for_the_next_chunk() -> None:
    def chunks() -> Any:
        yield b"data: 1\r\n\r"
        raise AssertionError("the next chunk was waited for")  # (a server may be silent)

    lines = iter_lines(chunks())
    assert next(lines) == b"data: 1"
    assert next(lines) == b""  # the blank line that dispatches the event, at once


def test_iter_lines_agrees_with_a_reference_split_under_random_chunking() -> None:
    rng = random.Random(13)
    for _ in range(300):
        data = bytes(rng.choice(b"ab\r\n") for _ in range(rng.randrange(0, 40)))
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randrange(4))))
        chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        expected = re.split(rb"\r\n|\r|\n", data)
        if expected[-1] == b"":
            expected.pop()  # a terminated last line, not one more empty line
        assert list(iter_lines(chunks)) == expected, (data, chunks)


def test_one_huge_event_parses_in_linear_time() -> None:
    """16 MB in one text_delta, read 16 KiB at a time: the line reader joins the pieces
    once (it was quadratic: ~2.5 s of CPU here, 7.7 s with smaller reads)."""
    text = "lorem ipsum " * ((16 << 20) // 12)
    huge = delta(0, type="text_delta", text=text)
    data = sse(start(), block_start(0, {"type": "text", "text": ""}), huge, stop(0), *end())
    chunks = [data[i : i + (16 << 10)] for i in range(0, len(data), 16 << 10)]
    payload = json.dumps(huge).encode()

    def cpu(fn: Any) -> float:
        started = time.process_time()
        fn()
        return time.process_time() - started

    floor = max(cpu(lambda: json.loads(payload)) for _ in range(3))
    took = min(cpu(lambda: parse_stream(chunks)) for _ in range(2))
    assert parse_stream(chunks)["content"][0]["text"] == text
    assert took < 1.0 and took <= 10 * floor + 0.05, (took, floor)


# -- SSEDecoder -----------------------------------------------------------------------


def decode_all(lines: List[Any]) -> List[ServerSentEvent]:
    decoder = SSEDecoder()
    out = [e for e in map(decoder.decode, lines) if e is not None]
    last = decoder.flush()
    return out + ([last] if last else [])


def test_decoder_fields_comments_and_optional_space() -> None:
    events = decode_all([
        ": keep-alive comment", "event: ping", "data:{\"a\":1}", "", "",
        "event:  two spaces", "data: x", "id: 7", "retry: 100", "unknown: y", "",
    ])
    assert events == [ServerSentEvent("ping", b'{"a":1}'), ServerSentEvent(" two spaces", b"x")]


def test_decoder_multi_line_data_joined_with_newline() -> None:
    assert decode_all([b"data: {", b"data: \"a\": 1", b"data", b"data:}", b""]) == [
        ServerSentEvent(None, b'{\n"a": 1\n\n}')
    ]
    assert json.loads(decode_all([b"data: {", b"data:\"a\": 2}", b""])[0].data) == {"a": 2}


def test_decoder_event_without_data_is_dropped_and_name_reset() -> None:
    assert decode_all(["event: lonely", "", "data: 1", ""]) == [ServerSentEvent(None, b"1")]


def test_decoder_flush_emits_a_last_event_without_blank_line() -> None:
    assert decode_all(["event: message_stop", 'data: {"type":"message_stop"}']) == [
        ServerSentEvent("message_stop", b'{"type":"message_stop"}')
    ]


# -- parse_stream / MessageAccumulator ----------------------------------------------------


def test_text_deltas_assembled_and_every_event_forwarded() -> None:
    seen: List[Dict[str, Any]] = []
    message = parse_stream([sse(*text_stream("Hel", "lo", " world"))], seen.append)
    reply = reply_from_message(message)
    assert reply["content"] == [{"type": "text", "text": "Hello world"}]
    assert reply["stop_reason"] == "end_turn"
    assert reply["model"] == "claude-x" and reply["provider_response_id"] == "msg_1"
    assert [e["type"] for e in seen] == [
        "message_start", "content_block_start", "ping", "content_block_delta",
        "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]


@pytest.mark.parametrize("sep", ["\r\n", "\r"])
def test_crlf_and_cr_streams(sep: str) -> None:
    data = sse(*text_stream("a", "b"), sep=sep)
    chunks = [data[i : i + 7] for i in range(0, len(data), 7)]
    assert reply_from_message(parse_stream(chunks))["content"][0]["text"] == "ab"


def test_tool_input_from_partial_json_and_empty_input() -> None:
    events = [
        start(),
        block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}),
        delta(0, type="input_json_delta", partial_json=""),
        delta(0, type="input_json_delta", partial_json='{"city": "Pa'),
        delta(0, type="input_json_delta", partial_json='ris", "n": [1, 2]}'),
        stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}}),
        delta(1, type="input_json_delta", partial_json=""),
        stop(1),
        *end("tool_use"),
    ]
    content = parse_stream([sse(*events)])["content"]
    assert content == [
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"city": "Paris", "n": [1, 2]}},
        {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
    ]


def test_cut_tool_input_is_an_error_unless_max_tokens() -> None:
    events = [start(), block_start(0, {"type": "tool_use", "id": "t", "name": "f", "input": {}}),
              delta(0, type="input_json_delta", partial_json='{"a": ')]
    with pytest.raises(APIConnectionError, match="tool input"):
        parse_stream([sse(*events, *end("tool_use"))])
    content = parse_stream([sse(*events, *end("max_tokens"))])["content"]
    assert content == [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]


def test_thinking_signature_and_redacted_thinking_kept_verbatim() -> None:
    events = [
        start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, type="thinking_delta", thinking="Let me "),
        delta(0, type="thinking_delta", thinking="think."),
        delta(0, type="signature_delta", signature="EqQBCkgIARABGAIiQ=="),
        stop(0),
        block_start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}),
        stop(1),
        block_start(2, {"type": "text", "text": ""}),
        delta(2, type="text_delta", text="Done."),
        stop(2),
        *end(),
    ]
    assert parse_stream([sse(*events)])["content"] == [
        {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBCkgIARABGAIiQ=="},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "text", "text": "Done."},
    ]


def test_citations_deltas_appended() -> None:
    cite = {"type": "web_search_result_location", "url": "https://x", "cited_text": "c"}
    events = [start(), block_start(0, {"type": "text", "text": ""}),
              delta(0, type="citations_delta", citation=cite),
              delta(0, type="text_delta", text="Fact."), stop(0), *end()]
    assert parse_stream([sse(*events)])["content"] == [
        {"type": "text", "text": "Fact.", "citations": [cite]}
    ]


def test_unknown_events_blocks_and_deltas_are_ignored() -> None:
    future = {"type": "future_block", "payload": {"x": 1}}
    events = [
        start(), {"type": "brand_new_event", "whatever": True},
        block_start(0, future), delta(0, type="future_delta", stuff="?"), stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, type="text_delta", text="hi"), delta(1, type="mystery_delta", x=1),
        delta(9, type="text_delta", text="no such block"), stop(1), *end(),
    ]
    assert parse_stream([sse(*events)])["content"] == [future, {"type": "text", "text": "hi"}]


def test_compaction_delta_fills_content() -> None:
    events = [start(), block_start(0, {"type": "compaction", "content": None}),
              delta(0, type="compaction_delta", content="summary"), stop(0), *end()]
    assert parse_stream([sse(*events)])["content"] == [{"type": "compaction", "content": "summary"}]


def test_usage_starts_from_message_start_and_non_null_fields_replace() -> None:
    events = [
        start(input_tokens=100, output_tokens=1, cache_read_input_tokens=50),
        block_start(0, {"type": "text", "text": ""}), delta(0, type="text_delta", text="x"),
        stop(0),
        {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 7}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 12, "input_tokens": 120, "cache_read_input_tokens": None,
                   "cache_creation_input_tokens": 30}},
        {"type": "message_stop"},
    ]
    reply = reply_from_message(parse_stream([sse(*events)]))
    assert reply["usage"] == {"input_tokens": 120, "output_tokens": 12,
                              "cache_creation_input_tokens": 30, "cache_read_input_tokens": 50}
    assert reply["stop_reason"] == "end_turn"


def test_usage_missing_fields_are_zero() -> None:
    reply = reply_from_message({"content": [], "stop_reason": "end_turn",
                                "usage": {"output_tokens": 3, "input_tokens": None}})
    assert reply["usage"] == {"input_tokens": 0, "output_tokens": 3,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_stop_sequence_recorded_in_message() -> None:
    events = text_stream("a")[:-2] + [
        {"type": "message_delta", "delta": {"stop_reason": "stop_sequence", "stop_sequence": "END"},
         "usage": {"output_tokens": 2}}, {"type": "message_stop"}]
    message = parse_stream([sse(*events)])
    assert message["stop_reason"] == "stop_sequence" and message["stop_sequence"] == "END"


@pytest.mark.parametrize(("kind", "cls"), [
    ("overloaded_error", OverloadedError),
    ("rate_limit_error", RateLimitError),
    ("api_error", InternalServerError),
    ("something_new", APIStatusError),
])
def test_error_event_raises_the_class_its_type_names(kind: str, cls: type) -> None:
    events = text_stream("a")[:4] + [{"type": "error", "error": {"type": kind, "message": "Nope"}}]
    seen: List[Dict[str, Any]] = []
    with pytest.raises(cls, match="Nope") as info:
        parse_stream([sse(*events)], seen.append)
    assert type(info.value) is cls
    assert info.value.status_code is None
    assert seen[-1]["type"] == "error"


def test_malformed_json_is_a_connection_error() -> None:
    with pytest.raises(APIConnectionError, match="malformed"):
        parse_stream([sse(start()) + b"event: content_block_start\ndata: {not json\n\n"])
    with pytest.raises(APIConnectionError, match="malformed"):
        parse_stream([b"data: [1, 2]\n\n"])


def test_stream_ending_before_message_stop_is_a_connection_error() -> None:
    with pytest.raises(APIConnectionError, match="message_stop"):
        parse_stream([sse(*text_stream("a")[:-1])])
    with pytest.raises(APIConnectionError, match="message_stop"):
        parse_stream([])


def test_empty_data_and_events_after_message_stop_are_ignored() -> None:
    data = sse(*text_stream("ok")) + b"data: not even json\n\n"
    assert parse_stream([b"data:\n\n" + data])["content"] == [{"type": "text", "text": "ok"}]


def test_a_done_line_from_a_proxy_is_skipped() -> None:
    events = text_stream("ok")
    data = sse(*events[:2]) + b"data: [DONE]\n\n" + sse(*events[2:])
    assert parse_stream([data])["content"] == [{"type": "text", "text": "ok"}]


def test_event_name_used_when_data_has_no_type() -> None:
    acc = MessageAccumulator()
    data = b'event: message_stop\ndata: {}\n\n'
    message = parse_stream([sse(*text_stream("x")[:-1]) + data])
    assert message["content"] == [{"type": "text", "text": "x"}]
    assert not acc.done


def test_caller_event_dicts_are_not_mutated_by_assembly() -> None:
    seen: List[Dict[str, Any]] = []
    parse_stream([sse(*text_stream("a", "b"))], seen.append)
    assert seen[1]["content_block"] == {"type": "text", "text": ""}


def test_message_start_content_is_kept() -> None:
    first = start()
    first["message"]["content"] = [{"type": "text", "text": "pre"}]
    events = [first, delta(0, type="text_delta", text="fix"), *end()]
    assert parse_stream([sse(*events)])["content"] == [{"type": "text", "text": "prefix"}]


def test_bulk_events_agree_with_line_by_line_decode() -> None:
    lines = [b": c", b"event: a", b"data: 1", b"data:2", b"", b"", b"event:b", b"id: 4",
             b"data", b"", b"retry: 5", b"data: x", b"event: late", b"", b"event: none", b""]
    bulk = list(SSEDecoder().events(lines))
    assert bulk == decode_all(lines)
    assert bulk == [ServerSentEvent("a", b"1\n2"), ServerSentEvent("b", b""),
                    ServerSentEvent("late", b"x")]


@pytest.mark.parametrize("piece", [0, 1, 7])
def test_message_events_round_trip(piece: int) -> None:
    message = {"id": "msg_rt", "model": "m", "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 3, "output_tokens": 9},
               "content": [
                   {"type": "thinking", "thinking": "hmm…", "signature": "sig"},
                   {"type": "text", "text": "Here \u2028 you go", "citations": [{"n": 1}]},
                   {"type": "tool_use", "id": "tu", "name": "f", "input": {"a": [1, "é"]}},
                   {"type": "server_tool_use", "id": "st", "name": "web_search",
                    "input": {"query": "q"}},
                   {"type": "web_search_tool_result", "tool_use_id": "st", "content": []},
               ]}
    data = sse(*message_events(message, piece=piece))
    chunks = [data[i : i + 5] for i in range(0, len(data), 5)]
    reply = reply_from_message(parse_stream(chunks))
    assert reply["content"] == message["content"]
    assert reply["usage"]["output_tokens"] == 9 and reply["provider_response_id"] == "msg_rt"
