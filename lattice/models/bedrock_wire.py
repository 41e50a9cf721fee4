"""What Bedrock Runtime adds to the Messages API, without any I/O: its error replies and
its response stream.

Errors: the exception name comes from the ``x-amzn-ErrorType`` header (``Name:uri``), else
the body's ``__type`` (``namespace#Name``); the message from the body's ``message``. The
name picks lattice's class (``ERROR_CLASSES``); anything else goes by HTTP status. A
``ValidationException`` that says the prompt is too long is a ``PromptTooLongError``.

Streams (``InvokeModelWithResponseStream``) are event-stream frames (``eventstream.py``):
an ``event`` frame of type ``chunk`` carries ``{"bytes": "<base64>"}``, the base64 of one
Messages stream event, which goes to the same ``MessageAccumulator`` the Anthropic client
uses; an ``exception`` frame (``:exception-type`` such as ``throttlingException``) raises
its class, an ``error`` frame (``:error-code``, ``:error-message``) likewise.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Type

from ..errors import (
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    PromptTooLongError,
    RateLimitError,
    is_prompt_too_long,
    status_error_class,
)
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import budget_of
from .eventstream import iter_frames
from .sse import EventCallback, MessageAccumulator, ServerSentEvent, json_scanner, load_data
from .status import clean_request_id, load_json, redact

__all__ = ["ModelTimeoutError", "ERROR_CLASSES", "bedrock_error", "exception_error",
           "parse_event_stream", "REQUEST_ID_HEADER"]

REQUEST_ID_HEADER = "x-amzn-requestid"


class ModelTimeoutError(APIStatusError):
    """Internal: a ``ModelTimeoutException`` (408). The transport retries it as a 408; the
    client then raises ``RequestTimeoutError`` from it."""


# exception name -> (class, the status Bedrock sends it with)
ERROR_CLASSES: Dict[str, Tuple[Type[APIStatusError], int]] = {
    "ThrottlingException": (RateLimitError, 429),
    "ServiceQuotaExceededException": (RateLimitError, 400),
    "ModelNotReadyException": (RateLimitError, 429),
    "ServiceUnavailableException": (OverloadedError, 503),
    "AccessDeniedException": (PermissionDeniedError, 403),
    "UnrecognizedClientException": (AuthenticationError, 403),
    "ValidationException": (BadRequestError, 400),
    "ResourceNotFoundException": (NotFoundError, 404),
    "ModelTimeoutException": (ModelTimeoutError, 408),
    "ModelErrorException": (InternalServerError, 424),
    "ModelStreamErrorException": (InternalServerError, 424),
    "InternalServerException": (InternalServerError, 500),
}


def _name(raw: Any) -> str:
    """``ThrottlingException`` from ``throttlingException``, ``Name:uri`` or ``ns#Name``."""
    text = str(raw or "").split(":", 1)[0].rsplit("#", 1)[-1].strip()
    return text[:1].upper() + text[1:]


def _classify(name: str, status: Optional[int], message: str) -> Type[APIStatusError]:
    found = ERROR_CLASSES.get(name)
    if found is not None:
        cls = found[0]
    else:
        cls = APIStatusError if status is None else status_error_class(status)
        if status not in (400, 413):
            return cls
    if issubclass(cls, BadRequestError) and is_prompt_too_long(message):
        cls = PromptTooLongError
    return cls


def bedrock_error(status: int, headers: Mapping[str, str], content: bytes,
                  secrets: Sequence[str]) -> APIStatusError:
    """The error for a Bedrock HTTP error reply."""
    text = redact(content.decode("utf-8", "replace"), secrets)
    try:
        body: Any = load_json(text)
    except ValueError:
        body = text
    fields = body if isinstance(body, dict) else {}
    name = _name(headers.get("x-amzn-ErrorType") or headers.get("x-amzn-errortype")
                 or fields.get("__type") or fields.get("code"))
    message = fields.get("message") or fields.get("Message")
    if not isinstance(message, str) or not message:
        message = (text.strip()[:1000] if not fields else "") or name or f"HTTP {status}"
    cls = _classify(name, status, message)
    request_id = clean_request_id(headers.get("x-amzn-RequestId")
                                  or headers.get(REQUEST_ID_HEADER), secrets)
    return cls(message, status_code=status, request_id=request_id, body=body)


def exception_error(headers: Mapping[str, Any], payload: bytes) -> APIStatusError:
    """The error an ``exception`` or ``error`` frame carries (mid-stream)."""
    if headers.get(":message-type") == "error":
        name = _name(headers.get(":error-code"))
        message = str(headers.get(":error-message") or name or "stream error frame")
        body: Any = {"code": name, "message": message}
    else:
        name = _name(headers.get(":exception-type"))
        try:
            body = load_json(payload.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            body = payload.decode("utf-8", "replace")
        fields = body if isinstance(body, dict) else {}
        found = fields.get("message") or fields.get("Message")
        message = found if isinstance(found, str) and found else (
            f"{name or 'unknown'} in the response stream")
    known = ERROR_CLASSES.get(name)
    status = known[1] if known is not None else None
    cls = _classify(name, None, message)
    return cls(f"{name}: {message}" if name and name not in message else message,
               status_code=status, body=body)


# The usual chunk payload, read without a JSON parse (the base64 alphabet checked on the
# way); anything else goes through json.
_CHUNK = re.compile(rb'\{\s*"bytes"\s*:\s*"([A-Za-z0-9+/]*={0,2})"\s*'
                    rb'(?:,\s*"p"\s*:\s*"[A-Za-z0-9]*"\s*)?\}')


def _chunk_event(payload: bytes, scan: Any) -> Dict[str, Any]:
    """The Messages event a ``chunk`` payload carries (base64 in ``bytes``)."""
    found = _CHUNK.fullmatch(payload)
    if found is not None:
        encoded: Any = found.group(1)
    else:
        try:
            outer = load_json(payload.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            outer = None
        encoded = outer.get("bytes") if isinstance(outer, dict) else None
        if not isinstance(encoded, str):
            raise APIConnectionError(f"malformed chunk in Bedrock stream: {payload[:200]!r}")
    try:
        raw = binascii.a2b_base64(encoded) if found is not None else base64.b64decode(
            encoded, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    event: Optional[Dict[str, Any]] = load_data(ServerSentEvent("chunk", raw), scan) if (
        raw) else None
    if event is None:
        raise APIConnectionError(
            f"malformed base64 in Bedrock stream chunk: {payload[:200]!r}") from None
    return event


def parse_event_stream(chunks: Iterable[bytes], on_event: Optional[EventCallback] = None,
                       limit: int = DEFAULT_MAX_RESPONSE_BYTES) -> Dict[str, Any]:
    """Read a Bedrock event stream up to ``message_stop``; return the message object
    (``sse.parse_stream``'s contract, on event-stream frames; no frame over ``limit``)."""
    accumulator = MessageAccumulator(budget_of(limit))
    try:
        feed = accumulator.feed
        scan = json_scanner()
        chunk_headers: Any = None  # iter_frames shares one dict between frames of equal
        # headers
        for headers, payload in iter_frames(chunks, limit):
            if headers is not chunk_headers:
                kind = headers.get(":message-type")
                if kind in ("exception", "error"):
                    raise exception_error(headers, payload)
                if kind != "event":
                    raise APIConnectionError(
                        f"malformed event stream: frame of message type {kind!r}")
                if headers.get(":event-type") != "chunk":
                    continue  # other event types carry nothing for the message
                chunk_headers = headers
            # The usual shape, inline (this loop runs once per token): base64 checked by the
            # pattern, JSON by the scanner; anything odd goes the slow way, which names it.
            found = _CHUNK.fullmatch(payload)
            event: Any = None
            if found is not None:
                try:
                    text = binascii.a2b_base64(found.group(1)).decode("utf-8")
                    event, end = scan(text, 0)
                    if end != len(text) or type(event) is not dict:
                        event = None
                except (ValueError, StopIteration, RecursionError):
                    event = None
            if event is None:
                event = _chunk_event(payload, scan)
            if on_event is not None:
                on_event(event)
            feed(event)
            if accumulator.done:
                break
        return accumulator.message()
    except BaseException:
        accumulator.release()  # the traceback keeps this frame: not what it gathered
        raise
