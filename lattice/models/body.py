"""Reading a streamed response body: chunks under a wall-clock deadline, and the end.

``read_chunks`` hands over the bytes of a response as they arrive and gives up at the
request's deadline even when a server trickles bytes slowly enough never to trip a read
timeout. ``read_body`` reads a whole body, at most ``limit`` decoded bytes (SPEC 16a:
``max_response_bytes``; a server that sends more, however long, costs us no more memory
than that). ``finish_stream`` reads what is left once the reply is complete, briefly, so the
connection can go back to the pool. The response is duck-typed (``raw``,
``iter_content``, as ``requests`` has) and the transport's exception classes are passed
in: nothing here imports ``requests`` (``http.py`` is the one module that does).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, List, Optional, Tuple, Type

from ..errors import APIConnectionError, RequestTimeoutError

__all__ = ["read_chunks", "read_body", "too_large", "finish_stream", "CHUNK_SIZE",
           "END_GRACE", "DEFAULT_MAX_RESPONSE_BYTES"]

CHUNK_SIZE = 1 << 16
END_GRACE = 0.1  # s a finished stream may take to end its body before we hang up
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024


def too_large(what: str, limit: int) -> APIConnectionError:
    """The error for ``what`` (a body, a line, an event, a message) over ``limit`` bytes."""
    return APIConnectionError(f"{what} is larger than max_response_bytes ({limit} bytes); "
                              "the response was closed")


def read_chunks(response: Any, deadline: Optional[float], clock: Callable[[], float]
                ) -> Iterator[bytes]:
    """The body of ``response`` as it arrives; ``RequestTimeoutError`` past ``deadline``."""
    raw = response.raw
    read1 = _read_arrived(raw) if not getattr(raw, "chunked", True) else None
    if read1 is not None:
        # Without chunked encoding, iter_content blocks until a whole chunk is filled;
        # read1 hands over what has arrived.
        source: Iterator[bytes] = iter(lambda: read1() or b"", b"")
    else:
        source = response.iter_content(CHUNK_SIZE)
    for chunk in source:
        yield chunk
        # A server that trickles bytes never trips the read timeout: check the wall.
        if deadline is not None and clock() > deadline:
            raise RequestTimeoutError("model request timed out while streaming")


def _read_arrived(raw: Any) -> Optional[Callable[[], bytes]]:
    """A reader of what has arrived of ``raw`` (urllib3's response), or None."""
    read1 = getattr(raw, "read1", None)
    if read1 is not None:  # urllib3 2
        return lambda: read1(CHUNK_SIZE, decode_content=True)
    # urllib3 1.26 (botocore pins it on Python < 3.10) has no read1, but the http.client
    # response under it does; it cannot decode, so only for a body sent as it is.
    fp = getattr(raw, "_fp", None)
    headers = getattr(raw, "headers", None) or {}
    if callable(getattr(fp, "read1", None)) and not headers.get("content-encoding"):
        return lambda: fp.read1(CHUNK_SIZE)  # type: ignore[union-attr]
    return None


def read_body(response: Any, limit: int, deadline: Optional[float] = None,
              clock: Callable[[], float] = time.monotonic) -> bytes:
    """The whole (decoded) body of ``response``; ``too_large`` past ``limit`` bytes."""
    parts: List[bytes] = []
    size = 0
    for chunk in read_chunks(response, deadline, clock):
        size += len(chunk)
        if size > limit:
            raise too_large("the response body", limit)
        parts.append(chunk)
    return b"".join(parts)


def finish_stream(response: Any, chunks: Iterator[bytes],
                  errors: Tuple[Type[BaseException], ...], clock: Callable[[], float]) -> None:
    """After the stream's last event (``message_stop``, ``[DONE]``): read the end of the
    body if it is already on its way, so the connection goes back to the pool; a server
    that keeps the body open (pings after the end) gets ``END_GRACE`` s, then the
    response is closed (``close()`` drops a connection whose body was not read).
    ``errors`` are the transport's exception classes, ignored here."""
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    if sock is None:
        return  # nothing to bound a read with: close rather than risk waiting
    end, previous = clock() + END_GRACE, sock.gettimeout()
    try:
        sock.settimeout(END_GRACE)
        for _ in chunks:
            if clock() > end:
                return
    except (RequestTimeoutError,) + errors:  # the reply is complete; the rest is noise
        pass
    finally:  # a pooled connection may send its next request with it (older urllib3)
        with contextlib.suppress(OSError):
            sock.settimeout(previous)
