"""Server-sent events of the Anthropic Messages API, decoded without any I/O.

Three layers, each a pure function of its input, so tests feed them plain lists:

* ``iter_lines(chunks)``: byte chunks -> lines. LF, CRLF and CR all end a line. We split
  bytes, not text: ``str.splitlines`` would also split on U+2028 and friends, which are
  legal inside JSON strings, and a UTF-8 character cut between two chunks is only decoded
  once its whole line is there.
* ``SSEDecoder.decode(line)``: lines -> a ``ServerSentEvent`` at each blank line.
* ``MessageAccumulator.feed(event)`` (``sse_message.py``): event dicts -> the Messages
  API message object.

``parse_stream(chunks, on_event)`` chains them.
"""

from __future__ import annotations

import json
from itertools import chain
from json.scanner import make_scanner
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
    Union,
)

from ..errors import APIConnectionError
from .body import DEFAULT_MAX_RESPONSE_BYTES, too_large
from .budget import budget_of
from .sse_message import MessageAccumulator

__all__ = [
    "ServerSentEvent",
    "SSEDecoder",
    "MessageAccumulator",
    "iter_lines",
    "load_data",
    "parse_stream",
    "sse_events",
    "json_scanner",
    "TypedEvents",
]

EventCallback = Callable[[Dict[str, Any]], None]


class ServerSentEvent(NamedTuple):
    """One dispatched event: its ``event:`` name (or None) and its ``data:`` bytes."""

    event: Optional[str]
    data: bytes


def iter_lines(chunks: Iterable[bytes], limit: int = DEFAULT_MAX_RESPONSE_BYTES
               ) -> Iterator[bytes]:
    """Split byte chunks into lines without their terminators (LF, CRLF or CR).

    Linear however the input is cut: the pieces of a line that spans many chunks are
    joined once, when its end arrives (a 16 MB event read 8 KiB at a time was copied two
    thousand times). A line is yielded as soon as its end is seen, a CR at the end of a
    chunk included; a LF opening the next chunk is then the rest of that CRLF. A line
    longer than ``limit`` bytes raises ``APIConnectionError`` as soon as that is known
    (memory stays bounded however long the server keeps sending it).
    """
    pending: List[bytes] = []  # pieces of the current line, none holding a line end
    size = 0  # bytes in pending
    skip_lf = False
    first = True
    for chunk in chunks:
        if first and chunk:
            first = False
            if chunk.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM may open the stream
                chunk = chunk[3:]
        if skip_lf and chunk:
            skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            continue
        if b"\r" in chunk:
            skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        tail = lines.pop()
        if len(chunk) > limit and lines and max(map(len, lines)) > limit:
            raise too_large("an SSE line", limit)
        if pending and lines:
            if size + len(lines[0]) > limit:
                raise too_large("an SSE line", limit)
            pending.append(lines[0])
            lines[0] = b"".join(pending)
            pending, size = [], 0
        if tail:
            pending.append(tail)
            size += len(tail)
            if size > limit:
                raise too_large("an SSE line", limit)
        yield from lines
    if pending:
        yield b"".join(pending)


class SSEDecoder:
    """The SSE state machine: ``decode(line)`` returns an event at each blank line.

    Only ``event`` and ``data`` matter to the Messages API; ``id``, ``retry`` and unknown
    fields are ignored, as are ``:`` comments (servers use them as keep-alives).
    """

    __slots__ = ("_event", "_data")

    def __init__(self) -> None:
        self._event: Optional[str] = None
        self._data: List[bytes] = []

    def decode(self, line: Union[bytes, str]) -> Optional[ServerSentEvent]:
        """Feed one line (without its terminator); return an event when one is complete."""
        if isinstance(line, str):
            line = line.encode("utf-8")
        if not line:
            return self.flush()
        if line[0] == 0x3A:  # ":" starts a comment
            return None
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        return None

    def flush(self) -> Optional[ServerSentEvent]:
        """Dispatch what has been gathered (at a blank line, or when the stream ends)."""
        data = self._data
        event, self._event = self._event, None
        if not data:
            return None  # per the SSE spec, an event without data is dropped
        self._data = []
        return ServerSentEvent(event, data[0] if len(data) == 1 else b"\n".join(data))

    def events(self, lines: Iterable[bytes], limit: int = DEFAULT_MAX_RESPONSE_BYTES
               ) -> Iterator[ServerSentEvent]:
        """``decode`` over many byte lines, yielding each event; an event whose data
        adds up to more than ``limit`` bytes raises ``APIConnectionError``.

        The same rules with the common lines (``data:``, ``event:``, blank) handled inline:
        this loop runs three times per streamed token, and a method call per line showed.
        """
        size = 0  # data bytes of an event of several data lines (one is bounded by iter_lines)
        for line in lines:
            if line.startswith(b"data:"):
                value = line[6:] if line[5:6] == b" " else line[5:]
                if self._data:  # rare: counted only then, so one-line events cost nothing
                    size = (size or len(self._data[0])) + len(value)
                    if size > limit:
                        raise too_large("an SSE event", limit)
                self._data.append(value)
            elif line.startswith(b"event:"):
                value = line[7:] if line[6:7] == b" " else line[6:]
                self._event = value.decode("utf-8", "replace")
            elif line:
                self.decode(line)
            else:
                size = 0
                event = self.flush()
                if event is not None:
                    yield event


def load_data(sse: ServerSentEvent, scan: Callable[[str, int], Tuple[Any, int]]) -> Any:
    """The JSON object in ``sse.data``, as sent (None for empty data); malformed data or
    anything but an object raises ``APIConnectionError``. ``scan`` is a ``json.scanner``
    made once per stream."""
    try:
        text = sse.data.decode("utf-8")
        # The C scanner under json.loads, called directly: loads' type checks and regex
        # passes cost more than the parse itself on a token-sized event.
        event, end = scan(text, 0)
        if end != len(text) and text[end:].strip():
            raise ValueError("extra data")
    except RecursionError:
        raise APIConnectionError(
            f"stream event {sse.event!r} is JSON nested too deeply to parse") from None
    except (StopIteration, ValueError):
        event = _load_slowly(sse)
        if event is None:
            return None
    if not isinstance(event, dict):
        raise _malformed(sse)
    return event


def _load_slowly(sse: ServerSentEvent) -> Any:
    data = sse.data.strip()
    if not data or data == b"[DONE]":
        return None  # "data:" with nothing in it, or the [DONE] some proxies end with
    try:
        return json.loads(sse.data)  # leading whitespace, odd encodings
    except ValueError:
        raise _malformed(sse) from None


def _malformed(sse: ServerSentEvent) -> APIConnectionError:
    return APIConnectionError(f"malformed data in stream event {sse.event!r}: {sse.data[:200]!r}")


class TypedEvents(Protocol):
    """What ``parse_stream`` feeds: the Messages accumulator, or another API's whose events
    carry their ``type`` the same way (the Responses API's, ``responses_stream.py``)."""

    done: bool  # the final event came: stop reading

    def feed(self, event: Dict[str, Any]) -> None: ...

    def message(self) -> Dict[str, Any]: ...

    def release(self) -> None: ...


def sse_events(chunks: Iterable[bytes], limit: int) -> Iterator[ServerSentEvent]:
    """The events of an SSE byte stream, in order (no line or event over ``limit``); a last
    event without its blank line is tolerated (the decoder is flushed at the end)."""
    decoder = SSEDecoder()
    return chain(decoder.events(iter_lines(chunks, limit), limit), iter(decoder.flush, None))


def json_scanner() -> Callable[[str, int], Tuple[Any, int]]:
    """The scanner ``load_data`` parses with: one per stream, since it memoizes the keys
    it has seen (every event repeats the same ones)."""
    return make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def parse_stream(
    chunks: Iterable[bytes], on_event: Optional[EventCallback] = None,
    limit: int = DEFAULT_MAX_RESPONSE_BYTES,
    accumulator: Optional[Callable[[Any], TypedEvents]] = None,
) -> Dict[str, Any]:
    """Read an SSE byte stream up to ``message_stop``; return the message object.

    Each parsed event dict goes to ``on_event`` first; an event without a ``type`` takes
    its ``event:`` name. Stops reading at ``message_stop`` (the caller may drain the
    rest). Raises ``APIConnectionError`` for malformed data or a stream that ends early,
    and the matching ``APIStatusError`` for an ``error`` event. ``accumulator`` (default
    ``MessageAccumulator``) is made with the reply's budget (``budget.py``), fed the
    events, and says when they end and what they made; a failed stream releases it.
    """
    events = (accumulator or MessageAccumulator)(budget_of(limit))
    try:
        feed = events.feed
        scan = json_scanner()
        for sse in sse_events(chunks, limit):
            event = load_data(sse, scan)
            if event is None:
                continue
            if sse.event and "type" not in event:  # the type from the event: name
                event["type"] = sse.event
            if on_event is not None:
                on_event(event)
            feed(event)
            if events.done:
                break
        return events.message()
    except BaseException:
        events.release()  # the traceback keeps this frame: not what it gathered
        raise
