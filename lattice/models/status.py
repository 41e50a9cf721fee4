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
from typing import Any, Mapping, Optional, Sequence

from ..errors import APIStatusError, PromptTooLongError, is_prompt_too_long, status_error_class

__all__ = [
    "error_from_response",
    "error_message",
    "redact",
    "add_hint",
    "clean_request_id",
    "load_json",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def add_hint(error: APIStatusError, hint: str) -> None:
    """Append ``(hint: ...)`` to an error's message (a likely misconfiguration)."""
    error.message += f" (hint: {hint})"
    error.args = (error.message,)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``<redacted>``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "<redacted>")
    return text


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
