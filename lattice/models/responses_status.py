"""Responses API usage and errors, without any I/O: usage as lattice usage, and the error
class a failed response (or an ``error`` event) names by its ``code``."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

from ..errors import (
    APIConnectionError,
    APIStatusError,
    BadRequestError,
    InternalServerError,
    PromptTooLongError,
    RateLimitError,
    error_class_for_type,
    is_prompt_too_long,
    status_error_class,
)
from ..usage import token_count
from .status import error_message

__all__ = ["usage_from_responses", "error_from_responses"]


def usage_from_responses(usage: Any) -> Dict[str, int]:
    """Responses usage as lattice usage: cached input as cache reads (cache writes, when
    reported, as cache creation), reasoning tokens shown apart (they are output tokens)."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached, written = token_count(details.get("cached_tokens")), token_count(
        details.get("cache_write_tokens"))
    out_details = usage.get("output_tokens_details")
    reasoning = token_count(out_details.get("reasoning_tokens")) if isinstance(
        out_details, dict) else 0
    return {"input_tokens": max(0, token_count(usage.get("input_tokens")) - cached - written),
            "output_tokens": token_count(usage.get("output_tokens")),
            "cache_creation_input_tokens": written, "cache_read_input_tokens": cached,
            "reasoning_tokens": reasoning}


_BY_CODE: Dict[str, Type[APIStatusError]] = {
    "server_error": InternalServerError, "rate_limit_exceeded": RateLimitError,
    "insufficient_quota": RateLimitError, "vector_store_timeout": InternalServerError,
    "context_length_exceeded": PromptTooLongError, "invalid_prompt": BadRequestError}
_STATUS: Dict[Type[APIStatusError], int] = {
    BadRequestError: 400, PromptTooLongError: 400, RateLimitError: 429,
    InternalServerError: 500}


def error_from_responses(error: Any, request_id: Optional[str] = None) -> Exception:
    """The error a failed response or an ``error`` event names: the ``APIStatusError`` of
    its ``code`` (else its ``type``), else ``APIConnectionError``."""
    detail = error if isinstance(error, dict) else {}
    message = error_message({"error": error}) or "the response failed"
    code, kind = detail.get("code"), detail.get("type")
    cls: Optional[Type[APIStatusError]] = None
    if isinstance(code, str):
        cls = _BY_CODE.get(code)
        if cls is None and code.startswith(("invalid_", "image_", "unsupported_", "empty_",
                                            "failed_to_download")):
            cls = BadRequestError
    if cls is None and isinstance(kind, str) and error_class_for_type(kind) is not \
            APIStatusError:
        cls = error_class_for_type(kind)
    if cls is None and isinstance(code, int) and not isinstance(code, bool) and code >= 400:
        cls = status_error_class(code)
    if cls is BadRequestError and is_prompt_too_long(message, code):
        cls = PromptTooLongError
    if cls is None:
        return APIConnectionError(f"the response failed: {message}")
    return cls(message, status_code=_STATUS.get(cls), request_id=request_id,
               body={"error": error})
