"""Google's error replies -> lattice errors, without any I/O.

Both Gemini APIs answer an error with ``{"error": {"code", "message", "status",
"details"}}`` (a JSON array holding that object on a streaming URL, and JSON even under an
SSE content type). The class comes from ``error.status`` (the HTTP status when it names
none): ``INVALID_ARGUMENT`` -> ``BadRequestError`` (``PromptTooLongError`` when the input
token count exceeds the model's limit, ``AuthenticationError`` when an ``ErrorInfo``
reason is ``API_KEY_INVALID``, status 400 kept), ``UNAUTHENTICATED``,
``PERMISSION_DENIED``, ``NOT_FOUND``, ``RESOURCE_EXHAUSTED`` -> ``RateLimitError`` (its
``RetryInfo`` delay becomes ``retry_after``, which the transport waits),
``UNAVAILABLE`` -> ``OverloadedError``, ``INTERNAL`` and the rest of 5xx ->
``InternalServerError``. Secrets are redacted from whatever the server echoes.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Sequence, Type

from ..errors import (
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
from .status import clean_request_id, load_json
from .urls import redact

__all__ = ["error_from_gemini", "gemini_error", "retry_delay"]

_BY_STATUS: Dict[str, Type[APIStatusError]] = {
    "INVALID_ARGUMENT": BadRequestError, "FAILED_PRECONDITION": BadRequestError,
    "OUT_OF_RANGE": BadRequestError, "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": PermissionDeniedError, "NOT_FOUND": NotFoundError,
    "RESOURCE_EXHAUSTED": RateLimitError, "UNAVAILABLE": OverloadedError,
    "INTERNAL": InternalServerError, "UNKNOWN": InternalServerError,
    "DEADLINE_EXCEEDED": InternalServerError}
# "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
_TOO_LONG = re.compile(r"token count.{0,40}exceeds the maximum|exceeds the maximum number of "
                       r"tokens", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")
_API_KEY_INVALID = "API_KEY_INVALID"


def _details(error: Mapping[str, Any]) -> Sequence[Any]:
    details = error.get("details")
    return details if isinstance(details, list) else ()


def retry_delay(error: Mapping[str, Any]) -> Optional[float]:
    """Seconds a ``RetryInfo`` detail asks to wait (``"37s"``), or None."""
    for detail in _details(error):
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            found = _DURATION.match(str(detail.get("retryDelay", "")))
            if found:
                return float(found.group(1))
    return None


def _reasons(error: Mapping[str, Any]) -> Sequence[str]:
    return [str(d.get("reason")) for d in _details(error)
            if isinstance(d, dict) and str(d.get("@type", "")).endswith("ErrorInfo")]


def error_from_gemini(status: int, body: Any, *, request_id: Optional[str] = None,
                      text: str = "") -> APIStatusError:
    """The error for an HTTP ``status`` and its parsed ``body`` (``text`` when it had no
    Google error object)."""
    if isinstance(body, list) and body:
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    message = error.get("message") if isinstance(error.get("message"), str) else ""
    message = message or text.strip()[:1000] or f"HTTP {status}"
    code = error.get("status")
    cls = _BY_STATUS.get(code) if isinstance(code, str) else None
    if cls is None:
        cls = status_error_class(status)
    if cls is BadRequestError and (_TOO_LONG.search(message) or is_prompt_too_long(message)):
        cls = PromptTooLongError
    if _API_KEY_INVALID in _reasons(error):
        cls = AuthenticationError
    found = cls(message, status_code=status, request_id=request_id, body=body)
    delay = retry_delay(error)
    if delay is not None:
        found.retry_after = delay  # type: ignore[attr-defined]
    return found


def gemini_error(status: int, headers: Mapping[str, str], content: bytes,
                 secrets: Sequence[str]) -> APIStatusError:
    """The error for an HTTP error response (``Codec.error``)."""
    text = redact(content.decode("utf-8", "replace"), secrets)  # a server may echo the key
    try:
        body: Any = load_json(text)
    except ValueError:
        body = text
    request_id = clean_request_id(headers.get("x-request-id"), secrets)
    return error_from_gemini(status, body, request_id=request_id,
                             text=text if not isinstance(body, (dict, list)) else "")
