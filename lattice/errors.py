"""Every exception lattice raises, in one tree.

::

    LatticeError
    ├── ConcurrentQueryError          a second query on a busy Agent (also from replace_history)
    │   └── LockLostError             another holder took the session over mid-query (fencing)
    ├── MissingOutputError            the model ended without submit_output
    ├── MaxTurnsExceededError         the query reached max_turns (on ResultMessage.error)
    ├── BudgetExceededError           the query reached max_budget_tokens (on ResultMessage.error)
    ├── RequestTimeoutError           a model request outlived its deadline (also TimeoutError)
    ├── AbortError                    the query's signal fired
    ├── HistoryStoreError             a store failed and fail_on_error=True
    ├── SchemaError                   a schema that is itself invalid (also ValueError)
    ├── ValidationError               an instance does not match its schema (lattice.schema;
    │                                 .errors, each with .path and .schema_path; also ValueError)
    ├── MCPError                      an MCP server failed (lattice.mcp; .server, .kind)
    └── APIError                      anything from the provider or the way to it
        ├── APIConnectionError        no usable response: connection failed, stream cut or malformed
        ├── ReplyRejectedError        a FallbackModelClient's on_reply refused a reply (.reply)
        └── APIStatusError            an HTTP error status (.status_code, .request_id, .body)
            ├── BadRequestError 400
            │   └── PromptTooLongError
            ├── AuthenticationError 401
            ├── PermissionDeniedError 403
            ├── NotFoundError 404
            ├── RateLimitError 429
            ├── InternalServerError 5xx
            └── OverloadedError 529

Programmer mistakes (bad options) are plain ``ValueError``/``TypeError``, outside this tree.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Union

__all__ = [
    "LatticeError",
    "ConcurrentQueryError",
    "LockLostError",
    "MissingOutputError",
    "MaxTurnsExceededError",
    "BudgetExceededError",
    "RequestTimeoutError",
    "AbortError",
    "HistoryStoreError",
    "SchemaError",
    "APIError",
    "APIConnectionError",
    "ReplyRejectedError",
    "APIStatusError",
    "BadRequestError",
    "PromptTooLongError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "RateLimitError",
    "InternalServerError",
    "OverloadedError",
    "status_error_class",
    "error_class_for_type",
    "is_prompt_too_long",
]


class LatticeError(Exception):
    """Base class of every error lattice raises on purpose."""


class ConcurrentQueryError(LatticeError):
    """A query was started (or history replaced) while another query of the Agent runs."""


class LockLostError(ConcurrentQueryError):
    """The session lock this query held was taken over by another holder (its lease ran out
    while this process was paused, or its database connection died and someone else locked
    the session meanwhile): the store refused the write, and the query writes nothing more.
    """


class MissingOutputError(LatticeError):
    """The model ended its turn without calling submit_output."""


class MaxTurnsExceededError(LatticeError):
    """The query made ``max_turns`` model requests without finishing."""


class BudgetExceededError(LatticeError):
    """The query's token usage reached ``max_budget_tokens`` before a model request."""


class RequestTimeoutError(LatticeError, TimeoutError):
    """A model request outlived ``request_timeout_ms`` (or the client's own timeout).

    ``kind`` says which limit: ``"request"`` (the deadline of the whole request:
    ``request_timeout_ms`` or the client's ``timeout_ms``), ``"connect"`` (no connection
    within the connect timeout) or ``"read"`` (the server went silent for the read
    timeout).
    """

    KINDS = ("connect", "read", "request")

    def __init__(self, message: str = "model request timed out", *,
                 kind: str = "request") -> None:
        if kind not in self.KINDS:
            raise ValueError(f"RequestTimeoutError kind must be one of {self.KINDS}, "
                             f"got {kind!r}")
        super().__init__(message)
        self.kind = kind


class AbortError(LatticeError):
    """The query's abort signal fired."""


class HistoryStoreError(LatticeError):
    """A history store failed while ``fail_on_error=True`` (the cause is chained)."""


class SchemaError(LatticeError, ValueError):
    """A JSON Schema (or a type turned into one) that is itself invalid.

    ``path`` is where in the schema (JSON Pointer segments, array indices as ints; ``[]``
    for the root or when unknown); ``reason`` is the message without its location prefix.
    """

    def __init__(self, message: str, *, path: Optional[List[Union[str, int]]] = None,
                 reason: str = "") -> None:
        super().__init__(message)
        self.path: List[Union[str, int]] = list(path or [])
        self.reason = reason or message


# -- provider errors -------------------------------------------------------------------


class APIError(LatticeError):
    """Anything that went wrong talking to the model provider."""

    def __init__(
        self,
        message: str,
        *,
        status_code: Optional[int] = None,
        request_id: Optional[str] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.request_id = request_id
        self.body = body


class APIConnectionError(APIError):
    """No usable response: the connection failed, or the stream was cut or malformed."""


class ReplyRejectedError(APIError):
    """A ``FallbackModelClient``'s ``on_reply`` refused a reply (kept in ``.reply``)."""

    def __init__(self, message: str, *, reply: Any = None) -> None:
        super().__init__(message)
        self.reply = reply


class APIStatusError(APIError):
    """The provider answered with an HTTP error status."""

    def __str__(self) -> str:
        parts = [self.message]
        if self.status_code is not None:
            parts.append(f"(status {self.status_code}")
            parts[-1] += f", request_id {self.request_id})" if self.request_id else ")"
        return " ".join(parts)


class BadRequestError(APIStatusError):
    """400: the request was malformed or refused."""


class PromptTooLongError(BadRequestError):
    """The provider rejected the input as longer than the context window."""


class AuthenticationError(APIStatusError):
    """401: missing or invalid credentials."""


class PermissionDeniedError(APIStatusError):
    """403: the credentials may not use this resource."""


class NotFoundError(APIStatusError):
    """404: unknown endpoint or model."""


class RateLimitError(APIStatusError):
    """429: too many requests."""


class InternalServerError(APIStatusError):
    """5xx: the provider failed."""


class OverloadedError(APIStatusError):
    """529: the provider is overloaded."""


_BY_STATUS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    429: RateLimitError,
    529: OverloadedError,
}

_BY_TYPE = {
    "invalid_request_error": BadRequestError,
    "authentication_error": AuthenticationError,
    "permission_error": PermissionDeniedError,
    "not_found_error": NotFoundError,
    "rate_limit_error": RateLimitError,
    "api_error": InternalServerError,
    "overloaded_error": OverloadedError,
}


def status_error_class(status_code: int) -> type[APIStatusError]:
    """The error class for an HTTP status (``APIStatusError`` for unlisted ones)."""
    if status_code in _BY_STATUS:
        return _BY_STATUS[status_code]
    if 500 <= status_code < 600:
        return InternalServerError
    return APIStatusError


def error_class_for_type(error_type: Optional[str]) -> type[APIStatusError]:
    """The error class an Anthropic ``error.type`` names (mid-stream ``error`` events)."""
    return _BY_TYPE.get(error_type or "", APIStatusError)


# How providers and proxies word "your input does not fit the context window": Anthropic
# ("prompt is too long: N tokens > M maximum", "input length and `max_tokens` exceed
# context limit"), OpenAI ("maximum context length", code "context_length_exceeded"),
# LiteLLM ("ContextWindowExceededError"), and the usual variants of each.
_TOO_LONG = re.compile(
    r"prompt is too long|input is too long|too many (input )?tokens|"
    r"context[ _-]length[ _-]exceeded|maximum context length|"
    r"context[ _-]?window[ _-]?exceeded|"
    r"exceeds? (the )?(model'?s? )?(maximum )?context (window|length|limit)",
    re.IGNORECASE,
)
_TOO_LONG_CODES = frozenset(["context_length_exceeded", "string_above_max_length"])


def is_prompt_too_long(message: Any, code: Any = None) -> bool:
    """Whether an error's ``message`` (or its machine-readable ``code``) says the input is
    longer than the context window: such a 400/413 is a ``PromptTooLongError``. The one
    recogniser, for every provider and wire format."""
    if isinstance(code, str) and code in _TOO_LONG_CODES:
        return True
    return any(isinstance(text, str) and _TOO_LONG.search(text) for text in (message, code))
