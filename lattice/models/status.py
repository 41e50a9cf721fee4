"""HTTP error replies -> lattice errors, for every wire format, without any I/O.

One reader for error bodies of both APIs: Anthropic's ``{"type": "error", "error":
{"type", "message"}}`` and the OpenAI-style ``{"error": {"message", "type", "code"}}``
(proxies also send ``{"error": "text"}``, ``{"message": ...}``, ``{"detail": ...}`` or a
list holding one such object). The error class comes from the status table in
``errors.py``; a too-long prompt, in any of the usual wordings, is ``PromptTooLongError``.
Secrets are redacted from whatever a server echoes back, the request id included.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Any, Iterator, Mapping, Optional, Sequence

from ..errors import APIStatusError, PromptTooLongError, is_prompt_too_long, status_error_class
from .urls import redact

__all__ = [
    "error_from_response",
    "error_message",
    "redact",
    "add_hint",
    "clean_request_id",
    "load_json",
    "readable",
    "valid_header_value",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def add_hint(error: APIStatusError, hint: str) -> None:
    """Append ``(hint: ...)`` to an error's message (a likely misconfiguration)."""
    error.message += f" (hint: {hint})"
    error.args = (error.message,)


def clean_request_id(value: Any, secrets: Sequence[str] = ()) -> Optional[str]:
    """A request id fit to show: a str, secrets redacted, no control characters, at most
    200 characters (a server may echo anything into a header)."""
    if value is None or value == "":
        return None
    text = _CONTROL.sub("", redact(str(value), secrets))
    return text[:200] or None


def load_json(text: Any) -> Any:
    """``json.loads``, with nesting too deep for the parser turned into a ``ValueError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def error_message(body: Any) -> str:
    """The human message an error body carries ("" when it has none)."""
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    if isinstance(error, dict):
        found = error.get("message") or error.get("msg")
        if found:
            return found if isinstance(found, str) else json.dumps(found)
    elif isinstance(error, str) and error:
        return error
    for key in ("message", "detail"):
        found = body.get(key)
        if isinstance(found, str) and found:
            return found
    return ""


def _error_code(body: Any) -> Any:
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def error_from_response(
    status: int,
    headers: Mapping[str, str],
    content: bytes,
    secrets: Sequence[str] = (),
    *,
    request_id_header: str = "request-id",
) -> APIStatusError:
    """The error for an HTTP error response: message from the body (else its text), the
    request id from ``request_id_header`` (else the body's ``request_id``), parsed body."""
    text = redact(content.decode("utf-8", "replace"), secrets)  # a server may echo the key
    try:
        body: Any = load_json(text)
    except ValueError:
        body = text
    message = error_message(body) or text.strip()[:1000] or f"HTTP {status}"
    request_id = headers.get(request_id_header) or (
        body.get("request_id") if isinstance(body, dict) else None
    )
    cls = status_error_class(status)
    if status in (400, 413) and is_prompt_too_long(message, _error_code(body)):
        cls = PromptTooLongError
    return cls(message, status_code=status, request_id=clean_request_id(request_id, secrets),
               body=body)


# -- connection failures, in a few readable words --------------------------------------------

_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>:?\s*")
_HEADER_OK = re.compile(r"^\S[^\r\n]*$|^$")


def valid_header_value(value: Any) -> bool:
    """True if HTTP can carry ``value`` as a header value as it is."""
    return isinstance(value, (str, bytes)) and bool(
        _HEADER_OK.match(value if isinstance(value, str) else value.decode("latin-1")))


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: urllib3 ``.reason``, exception args, cause, context."""
    seen, todo = set(), [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner = [getattr(current, "reason", None), current.__cause__, current.__context__]
        inner += list(getattr(current, "args", ()))
        todo += [e for e in inner if isinstance(e, BaseException)]


def readable(exc: BaseException) -> str:
    """A short reason for a failed connection, without urllib3's internals."""
    chain = list(_causes(exc))
    for item in chain:  # the OS's own words when there are some
        if isinstance(item, socket.gaierror):
            return f"cannot resolve the host name ({item.strerror or item})"
        if isinstance(item, OSError) and item.strerror and not isinstance(item, socket.timeout):
            return item.strerror
    import http.client

    for item in chain:
        if isinstance(item, http.client.HTTPException):
            return str(item) or type(item).__name__
    innermost = chain[-1]
    text = _OBJECT_REPR.sub("", str(innermost)).strip()
    return text or type(innermost).__name__
