"""What a provider adds to the shared transport (``http.py``): a codec, maybe a signer.

A provider is a codec (how replies and errors read) plus, where its API needs one, a
signer (how each attempt is authenticated), never a second transport:

* ``Codec``: ``read_json`` for a whole body, ``read_stream`` for the content types in
  ``stream_types`` (SSE, or a binary frame format such as
  ``application/vnd.amazon.eventstream``: the codec gets the raw byte chunks and the
  ``limit`` no line, event or frame may exceed), ``error`` for an HTTP error status.
* ``Signer``: ``sign(outgoing)`` runs before every attempt, retries included, with the
  ``Outgoing`` request (method, URL, headers, body bytes); it may add headers (a SigV4
  signature, a fresh bearer token) and puts any secret it adds in ``outgoing.secrets``
  so errors never show it. Pass it as ``Transport(..., sign=...)`` (through
  ``HTTPModelClient._make_transport``).
* ``Transport.send(..., url=...)``: a per-call URL (a model id in the path).
"""

from __future__ import annotations

from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
)

from ..errors import APIStatusError
from .base import ReplyDict

__all__ = ["Codec", "Outgoing", "Signer", "EventCallback"]

EventCallback = Callable[[Dict[str, Any]], None]


class Outgoing:
    """One attempt as it is about to be sent; a ``Signer`` may add headers and secrets."""

    __slots__ = ("method", "url", "headers", "body", "secrets")

    def __init__(self, method: str, url: str, headers: Dict[str, str], body: bytes,
                 secrets: List[str]) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.secrets = secrets


Signer = Callable[[Outgoing], None]


class Codec(Protocol):
    """One wire format, as the transport sees it (no I/O in any of these)."""

    api: str  # names the API in log lines, e.g. "Messages API"
    request_id_header: str  # e.g. "request-id" or "x-request-id"
    stream_types: Tuple[str, ...]  # content types read_stream reads, e.g. text/event-stream

    def read_json(self, content: bytes) -> ReplyDict:
        """The assistant dict in a 2xx body that is not a stream."""

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback],
                    limit: int) -> ReplyDict:
        """The assistant dict in a streamed body; stops reading once the reply is complete;
        ``body.too_large`` for any line, event or frame over ``limit`` bytes."""

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        """The error for an HTTP error status."""
