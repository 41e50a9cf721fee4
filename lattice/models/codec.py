"""What a provider adds to the shared transport (``http.py``): a codec, maybe a signer.

A provider is a codec (how replies and errors read) plus, where its API needs one, a
signer (how each attempt is authenticated), never a second transport:

* ``Codec``: ``read_json`` for a whole body, ``read_stream`` for a streamed body of
  content type ``stream_type`` (an optional attribute, default ``text/event-stream``; a
  binary frame format such as ``application/vnd.amazon.eventstream`` works alike: the
  codec gets the raw byte chunks and the ``limit`` no line, event or frame may exceed),
  ``error`` for an HTTP error status.
* ``Signer``: ``sign(url, body, headers)`` returns the headers of one attempt; the
  transport calls it before every attempt, retries included (a SigV4 signature covers
  the time). Secrets it uses go in the ``secrets`` given to ``send`` (never shown).
* ``Transport.send(..., url=..., sign=...)``: a per-call URL (a model id in the path)
  and signer.
"""

from __future__ import annotations

from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    Mapping,
    Optional,
    Protocol,
    Sequence,
)

from ..errors import APIStatusError
from .base import ReplyDict

__all__ = ["Codec", "Signer", "EventCallback"]

EventCallback = Callable[[Dict[str, Any]], None]


# (url, body, headers) -> the headers of one attempt: a signer (AWS SigV4) signs each
# attempt afresh, since the signature covers the time.
Signer = Callable[[str, bytes, Dict[str, str]], Dict[str, str]]


class Codec(Protocol):
    """One wire format, as the transport sees it (no I/O in any of these)."""

    api: str  # names the API in log lines, e.g. "Messages API"
    request_id_header: str  # e.g. "request-id" or "x-request-id"

    def read_json(self, content: bytes) -> ReplyDict:
        """The assistant dict in a 2xx body that is not a stream."""

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback],
                    limit: int) -> ReplyDict:
        """The assistant dict in a streamed body; stops reading once the reply is complete;
        ``body.too_large`` for any line, event or frame over ``limit`` bytes."""

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        """The error for an HTTP error status."""
