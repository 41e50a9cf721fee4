"""The ``application/vnd.amazon.eventstream`` framing (AWS streaming responses), decoded
and encoded without any I/O.

A frame (AWS calls it a message) is::

    total length (uint32) | headers length (uint32) | prelude CRC32 (of the 8 bytes before)
    headers | payload | message CRC32 (of everything before it, prelude included)

all big-endian. A header is a 1-byte name length, the name (UTF-8), a 1-byte type and a
value: 0 true, 1 false (no value), 2 byte, 3 short, 4 int, 5 long (signed, big-endian),
6 byte array and 7 string (2-byte length first), 8 timestamp (int64 milliseconds since
the epoch), 9 UUID (16 bytes). Decoded values are Python ``bool``, ``int``, ``bytes``,
``str``, ``int`` (timestamp) and ``bytes`` (UUID), as ``botocore`` gives them.

``iter_frames(chunks)`` yields ``(headers, payload)`` per frame however the bytes are cut
across reads (linear: a frame's pieces are joined once, when it is all there). Every
problem is an ``APIConnectionError`` naming it: a prelude or message CRC mismatch, a
length out of bounds, a header running past its frame, an unknown header type, or the
stream ending inside a frame. The headers dict of a frame may be shared with other frames
that carried the same header bytes (streams repeat them): treat it as read-only.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple

from ..errors import APIConnectionError
from .body import too_large

__all__ = ["Header", "iter_frames", "decode_headers", "encode_frame", "encode_headers",
           "MAX_HEADERS_BYTES", "MAX_PAYLOAD_BYTES"]

MAX_HEADERS_BYTES = 128 * 1024
MAX_PAYLOAD_BYTES = 24 * 1024 * 1024  # botocore's bounds, and AWS's
_PRELUDE = struct.Struct(">III")
_CRC = struct.Struct(">I")
_MIN_FRAME = 16  # prelude and message CRC, nothing between
_FIXED = {2: struct.Struct(">b"), 3: struct.Struct(">h"), 4: struct.Struct(">i"),
          5: struct.Struct(">q"), 8: struct.Struct(">q")}
_LENGTH = struct.Struct(">H")

Headers = Dict[str, Any]


class Header(NamedTuple):
    """A header value with its wire type spelled out, for ``encode_frame`` (2 byte,
    3 short, 4 int, 5 long, 6 byte array, 7 string, 8 timestamp, 9 UUID)."""

    type: int
    value: Any


def _bad(what: str) -> APIConnectionError:
    return APIConnectionError(f"malformed event stream: {what}")


def decode_headers(data: bytes) -> Headers:
    """The headers in ``data`` (one frame's header bytes)."""
    headers: Headers = {}
    pos, end = 0, len(data)
    try:
        while pos < end:
            size = data[pos]
            name = data[pos + 1 : pos + 1 + size].decode("utf-8")
            pos += 1 + size
            kind = data[pos]
            pos += 1
            value: Any
            if kind in (0, 1):
                value = kind == 0
            elif kind in _FIXED:
                fixed = _FIXED[kind]
                (value,) = fixed.unpack_from(data, pos)
                pos += fixed.size
            elif kind in (6, 7):
                (length,) = _LENGTH.unpack_from(data, pos)
                value = data[pos + 2 : pos + 2 + length]
                if len(value) != length:
                    raise _bad(f"header {name!r} runs past the end of its frame")
                value = value.decode("utf-8") if kind == 7 else bytes(value)
                pos += 2 + length
            elif kind == 9:
                value = bytes(data[pos : pos + 16])
                if len(value) != 16:
                    raise _bad(f"header {name!r} runs past the end of its frame")
                pos += 16
            else:
                raise _bad(f"header {name!r} has unknown type {kind}")
            if name in headers:
                raise _bad(f"header {name!r} appears twice in one frame")
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError):
        raise _bad("a header runs past the end of its frame") from None
    return headers


def iter_frames(chunks: Iterable[bytes], limit: Optional[int] = None
                ) -> Iterator[Tuple[Headers, bytes]]:
    """``(headers, payload)`` of each frame in a byte stream cut anywhere; a frame longer
    than ``limit`` bytes (``max_response_bytes``) raises as soon as its prelude says so."""
    parts: List[bytes] = []
    have, need = 0, _PRELUDE.size
    cache: Dict[bytes, Headers] = {}  # streams repeat the same header bytes frame after frame
    crc32, prelude_of, crc_of = zlib.crc32, _PRELUDE.unpack_from, _CRC.unpack_from  # hot loop
    for chunk in chunks:
        if not chunk:
            continue
        parts.append(chunk if isinstance(chunk, bytes) else bytes(chunk))
        have += len(chunk)
        if have < need:
            continue
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        view = memoryview(data)
        pos, end, need = 0, len(data), _PRELUDE.size
        while end - pos >= 12:
            total, headers_size, prelude_crc = prelude_of(data, pos)
            if crc32(data[pos : pos + 8]) != prelude_crc:
                raise _bad("prelude CRC mismatch")
            if headers_size > MAX_HEADERS_BYTES or total < _MIN_FRAME + headers_size or (
                    total - _MIN_FRAME - headers_size > MAX_PAYLOAD_BYTES):
                raise _bad(f"frame lengths out of bounds (total {total}, headers "
                           f"{headers_size})")
            if limit is not None and total > limit:
                raise too_large("an event-stream frame", limit)
            if end - pos < total:
                need = total - (end - pos)  # wait for the rest of this frame, then join once
                break
            stop = pos + total - 4
            if crc32(view[pos + 8 : stop], prelude_crc) != crc_of(data, stop)[0]:
                raise _bad("message CRC mismatch")
            start = pos + 12
            raw = data[start : start + headers_size]
            headers = cache.get(raw)
            if headers is None:
                headers = decode_headers(raw)
                if len(cache) < 64:
                    cache[raw] = headers
            yield headers, data[start + headers_size : stop]
            pos += total
        rest = data[pos:]
        parts = [rest] if rest else []
        have = len(rest)
        if have < _PRELUDE.size:
            need = _PRELUDE.size
    if have:
        raise _bad(f"the stream ended inside a frame ({have} bytes of it arrived)")


def encode_headers(headers: Mapping[str, Any]) -> bytes:
    """Header bytes: ``bool``, ``str`` (string), ``bytes`` (byte array), ``int`` (int32,
    or int64 when it does not fit) or a ``Header`` naming the type."""
    out = bytearray()
    for name, value in headers.items():
        raw_name = name.encode("utf-8")
        out += bytes([len(raw_name)]) + raw_name
        kind = value.type if isinstance(value, Header) else None
        value = value.value if isinstance(value, Header) else value
        if kind is None:
            if isinstance(value, bool):
                kind = 0 if value else 1
            elif isinstance(value, int):
                kind = 4 if -(2 ** 31) <= value < 2 ** 31 else 5
            elif isinstance(value, str):
                kind = 7
            elif isinstance(value, (bytes, bytearray)):
                kind = 6
            else:
                raise ValueError(f"event stream header {name!r}: no wire type for {value!r}")
        out.append(kind)
        if kind in _FIXED:
            out += _FIXED[kind].pack(value)
        elif kind in (6, 7):
            data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
            out += _LENGTH.pack(len(data)) + data
        elif kind == 9:
            if len(value) != 16:
                raise ValueError(f"event stream header {name!r}: a UUID is 16 bytes")
            out += bytes(value)
        elif kind not in (0, 1):
            raise ValueError(f"event stream header {name!r}: unknown type {kind}")
    return bytes(out)


def encode_frame(headers: Mapping[str, Any], payload: bytes) -> bytes:
    """One frame (see ``encode_headers`` for the header values)."""
    raw_headers = encode_headers(headers)
    total = _MIN_FRAME + len(raw_headers) + len(payload)
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += _CRC.pack(zlib.crc32(prelude))
    message = prelude + raw_headers + payload
    return message + _CRC.pack(zlib.crc32(message))
