"""The event-stream decoder (lattice/models/eventstream.py) and Bedrock's stream on it
(bedrock_wire.py): botocore's own decoder as the oracle, every byte boundary of a real
tool-use stream, and the documented error for each kind of broken frame."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any, Dict, List, Tuple

import pytest
from helpers import SHARED

from lattice.errors import (
    APIConnectionError,
    BadRequestError,
    InternalServerError,
    OverloadedError,
    PromptTooLongError,
    RateLimitError,
)
from lattice.models.bedrock_wire import ModelTimeoutError, parse_event_stream
from lattice.models.eventstream import Header, encode_frame, iter_frames
from lattice.models.sse import SSEDecoder, iter_lines, parse_stream
from lattice.models.wire import message_events
from lattice.testing._mock_bedrock import bedrock_frames

eventstream = pytest.importorskip("botocore.eventstream")

CAPTURE = (SHARED / "data" / "recorded-anthropic-traffic" / "anthropic-sdk-python" / "tests" /
           "lib" / "streaming" / "fixtures" / "tool_use_response.txt")
EVENT = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
TOOL_MESSAGE = {
    "id": "msg_bdrk_01", "type": "message", "role": "assistant", "model": "claude-x",
    "content": [{"type": "text", "text": "Let me check the weather \u2603 for you."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                 "input": {"city": "Paris", "units": "c\u00e9lsius", "days": [1, 2]}}],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 377, "output_tokens": 52, "cache_read_input_tokens": 3},
}


def botocore_frames(data: bytes) -> List[Tuple[Dict[str, Any], bytes]]:
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(data)
    return [(dict(m.headers), m.payload) for m in buffer]


def sse_events(text: bytes) -> List[Dict[str, Any]]:
    return [json.loads(e.data) for e in SSEDecoder().events(iter_lines([text + b"\n\n"]))]


def real_events() -> List[Dict[str, Any]]:
    if CAPTURE.is_file():
        return sse_events(CAPTURE.read_bytes())
    return message_events(TOOL_MESSAGE, piece=7)


# -- frames ------------------------------------------------------------------------------

EVERY_TYPE = {
    ":message-type": "event", "true": True, "false": False, "byte": Header(2, -128),
    "short": Header(3, -32768), "int": Header(4, 2 ** 31 - 1), "long": Header(5, -(2 ** 63)),
    "bytes": b"\x00\xff\x10", "string": "h\u00e9llo \u2603", "time": Header(8, 1764624000123),
    "uuid": Header(9, bytes(range(16))), "empty": "",
}


@pytest.mark.parametrize("headers, payload", [
    (EVENT, b'{"bytes":"eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0="}'),
    (EVERY_TYPE, b"payload"),
    ({}, b""),
    ({"only": "headers"}, b""),
    ({":message-type": "event"}, b"x" * 70000),
])
def test_frames_decode_as_botocore_decodes_them(headers: Dict[str, Any], payload: bytes) -> None:
    data = encode_frame(headers, payload) * 3
    ours = list(iter_frames([data]))
    assert ours == botocore_frames(data)
    assert len(ours) == 3 and ours[0][1] == payload


def test_a_bedrock_stream_decodes_as_botocore_decodes_it() -> None:
    data = bedrock_frames(real_events())
    ours = list(iter_frames([data]))
    theirs = botocore_frames(data)
    assert ours == theirs and len(ours) == len(real_events())
    decoded = [json.loads(base64.b64decode(json.loads(p)["bytes"])) for _, p in ours]
    assert [e["type"] for e in decoded] == [e["type"] for e in real_events()]


def test_split_at_every_byte_boundary_of_a_real_tool_use_stream() -> None:
    events = real_events()
    sse = b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode())
                   for e in events)
    expected = parse_stream([sse])
    assert any(b["type"] == "tool_use" for b in expected["content"])
    data = bedrock_frames(events)
    for cut in range(1, len(data)):
        seen: List[Dict[str, Any]] = []
        assert parse_event_stream([data[:cut], data[cut:]], seen.append) == expected, cut
        assert [e["type"] for e in seen] == [e["type"] for e in events]
    assert parse_event_stream([data[i : i + 1] for i in range(len(data))]) == expected
    assert parse_event_stream([data[i : i + 3] for i in range(0, len(data), 3)]) == expected


# -- broken frames: each gives the documented APIConnectionError --------------------------


def _frame() -> bytes:
    return encode_frame(EVENT, b'{"bytes":"eyJ0eXBlIjoicGluZyJ9"}')


def test_a_corrupted_prelude_crc() -> None:
    data = bytearray(_frame())
    data[9] ^= 0x01
    with pytest.raises(APIConnectionError, match="prelude CRC mismatch"):
        list(iter_frames([bytes(data)]))
    with pytest.raises(eventstream.ChecksumMismatch):
        botocore_frames(bytes(data))


def test_a_corrupted_message_crc_payload_or_header() -> None:
    frame = _frame()
    for position in (len(frame) - 1, len(frame) - 10, 20):
        data = bytearray(frame)
        data[position] ^= 0x40
        with pytest.raises(APIConnectionError, match="message CRC mismatch"):
            list(iter_frames([_frame(), bytes(data)]))
        with pytest.raises(eventstream.ChecksumMismatch):
            botocore_frames(bytes(data))


def test_a_truncated_frame() -> None:
    frame = _frame()
    for cut in (1, 11, 12, len(frame) - 1):
        with pytest.raises(APIConnectionError, match="ended inside a frame"):
            list(iter_frames([frame, frame[:cut]]))
    with pytest.raises(APIConnectionError, match="ended inside a frame"):
        parse_event_stream([bedrock_frames(message_events(TOOL_MESSAGE))[:-5]])


def test_a_stream_without_message_stop_is_cut() -> None:
    with pytest.raises(APIConnectionError, match="before message_stop"):
        parse_event_stream([bedrock_frames(message_events(TOOL_MESSAGE)[:-1])])


def test_lengths_out_of_bounds_and_bad_headers() -> None:
    prelude = struct.pack(">II", 8, 0)
    with pytest.raises(APIConnectionError, match="out of bounds"):
        list(iter_frames([prelude + struct.pack(">I", __import__("zlib").crc32(prelude))]))
    bad_type = encode_frame({"x": "y"}, b"")
    bad_type = bad_type[:12] + b"\x01x\x0a" + bad_type[15:]  # header type 10 does not exist
    bad_type = _recrc(bad_type)
    with pytest.raises(APIConnectionError, match="unknown type 10"):
        list(iter_frames([bad_type]))
    short = _recrc(encode_frame({"x": "yy"}, b"")[:-4] + b"\0\0\0\0", headers_size=5)
    with pytest.raises(APIConnectionError, match="runs past"):
        list(iter_frames([short]))


def _recrc(frame: bytes, headers_size: int = -1) -> bytes:
    import zlib

    body = frame[12:-4]
    size = struct.unpack(">I", frame[4:8])[0] if headers_size < 0 else headers_size
    prelude = struct.pack(">II", len(body) + 16, size)
    prelude += struct.pack(">I", zlib.crc32(prelude))
    return prelude + body + struct.pack(">I", zlib.crc32(prelude + body))


def test_malformed_chunk_payloads() -> None:
    start = bedrock_frames(message_events(TOOL_MESSAGE)[:1])
    for payload, words in ((b"not json", "malformed chunk"), (b'{"bytes": 3}', "malformed chunk"),
                           (b'{"bytes":"@@@"}', "malformed"),
                           (b'{"bytes":"' + base64.b64encode(b"[1]") + b'"}', "malformed data")):
        with pytest.raises(APIConnectionError, match=words):
            parse_event_stream([start + encode_frame(EVENT, payload)])
    padded = {"bytes": base64.b64encode(json.dumps({"type": "ping"}).encode()).decode(),
              "p": "abcdefghij"}
    frames = bedrock_frames(message_events(TOOL_MESSAGE))
    assert parse_event_stream([encode_frame(EVENT, json.dumps(padded).encode()) + frames])[
        "content"][1]["input"]["city"] == "Paris"


# -- exception and error frames mid-stream -----------------------------------------------


@pytest.mark.parametrize("name, message, cls", [
    ("throttlingException", "Too many requests", RateLimitError),
    ("serviceUnavailableException", "busy", OverloadedError),
    ("modelStreamErrorException", "model broke", InternalServerError),
    ("internalServerException", "oops", InternalServerError),
    ("validationException", "prompt is too long: 210000 tokens > 200000", PromptTooLongError),
    ("validationException", "bad field", BadRequestError),
    ("modelTimeoutException", "took too long", ModelTimeoutError),
])
def test_an_exception_frame_raises_its_class(name: str, message: str, cls: type) -> None:
    frame = encode_frame({":exception-type": name, ":content-type": "application/json",
                          ":message-type": "exception"}, json.dumps({"message": message}).encode())
    start = bedrock_frames(message_events(TOOL_MESSAGE)[:3])
    assert botocore_frames(frame)[0][0][":exception-type"] == name
    with pytest.raises(cls) as raised:
        parse_event_stream([start + frame])
    assert type(raised.value) is cls and message in str(raised.value)


def test_an_error_frame_raises() -> None:
    frame = encode_frame({":message-type": "error", ":error-code": "InternalFailure",
                          ":error-message": "the stream failed"}, b"")
    with pytest.raises(Exception, match="the stream failed"):
        parse_event_stream([frame])
    other = encode_frame({":message-type": "surprise"}, b"")
    with pytest.raises(APIConnectionError, match="surprise"):
        parse_event_stream([other])


def test_a_frame_over_max_response_bytes_is_refused_from_its_prelude() -> None:
    big = encode_frame(EVENT, b"x" * 5000)
    with pytest.raises(APIConnectionError, match="max_response_bytes"):
        list(iter_frames([big[:12]], limit=4096))  # known before the rest arrives
    assert len(list(iter_frames([big], limit=8192))) == 1
