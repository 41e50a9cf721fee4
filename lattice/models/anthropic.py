"""``AnthropicClient``: the Messages API codec on the shared HTTP transport.

The transport (``http.py``: session, retries, deadlines, cutting, the one place
``requests`` is imported) does the I/O; this module says what to send and how to read
what comes back. JSON shapes live in ``wire.py``, SSE in ``sse.py``, error bodies in
``status.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from ..errors import APIStatusError, AuthenticationError
from .base import ModelRequest, ReplyDict
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .client import DEFAULT_MAX_RESPONSE_BYTES, HTTPModelClient
from .http import EventCallback
from .options import check_secret, resolve_base_url, secret_from_env
from .retry import RetryPolicy
from .sse import parse_stream
from .status import add_hint, error_from_response
from .urls import endpoint
from .wire import count_body, dump_body, message_from_json, reply_from_message, request_body

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["AnthropicClient", "DEFAULT_BASE_URL", "API_VERSION"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


class MessagesCodec:
    """How the transport reads Messages API replies and errors."""

    api = "Messages API"
    request_id_header = "request-id"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def read_json(self, content: bytes) -> ReplyDict:
        return reply_from_message(message_from_json(content))

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback],
                    limit: int) -> ReplyDict:
        return reply_from_message(parse_stream(chunks, on_event, limit))

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        error = error_from_response(status, headers, content, secrets)
        if status == 404 and urlsplit(self.base_url).path.endswith("/v1"):
            add_hint(error, f"base_url {self.base_url!r} ends in /v1, and the client adds "
                     "/v1/messages itself; drop the /v1")
        return error


class AnthropicClient(HTTPModelClient):
    """Calls ``POST {base_url}/v1/messages``; a ``ModelClient`` for ``lattice.Agent``.

    One client (and its pooled ``requests.Session``) may be shared by any number of
    threads and agents.

    Args:
        api_key: sent as ``x-api-key``; default ``ANTHROPIC_API_KEY`` (read at each call).
            Surrounding whitespace (a newline from a key file) is stripped; a key with
            control characters inside is refused.
        base_url: default ``ANTHROPIC_BASE_URL``, else ``https://api.anthropic.com``.
        auth_token: sent as ``Authorization: Bearer``; default ``ANTHROPIC_AUTH_TOKEN``.
            Explicit credentials turn the environment off; from the environment, both
            variables are used when both are set.
        max_retries: retries of 408/409/429/5xx/529 and failed connections.
        stream: use SSE streaming (default) rather than one JSON response.
        default_headers: extra headers for every request (they win over ours).
        session: a ``requests.Session`` to use instead of the client's own. The client's
            own session reads proxy and CA-bundle variables once, when it is made.
        timeout_ms: deadline of one ``create()`` (retries included) when the request has
            none; without either, connect 10 s and read 600 s per attempt.
        retry_policy: a ``RetryPolicy``; it replaces ``max_retries`` when given.
        model: the model id this client always sends (a request's ``model`` is then
            ignored), e.g. one client of a ``FallbackModelClient``; default: the request's.
        max_response_bytes: the most one response body, SSE line or SSE event may hold
            (decoded); beyond it the call fails with ``APIConnectionError`` and the
            response is closed. Default 32 MiB. A streamed reply's content (text,
            thinking, tool input JSON) may add up to no more than this either.
        stream_idle_timeout_ms: a stream that progresses for this long (pings do not
            count) fails with ``APIConnectionError``; default 300000, None for no limit.
    """

    provider_name = "anthropic"  # gen_ai.provider.name in traces

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        auth_token: Optional[str] = None,
        max_retries: int = 2,
        stream: bool = True,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        model: Optional[str] = None,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
    ) -> None:
        self._api_key = check_secret("api_key", api_key)
        self._auth_token = check_secret("auth_token", auth_token)
        options = self._check_options(
            stream=stream, max_retries=max_retries, default_headers=default_headers,
            session=session, timeout_ms=timeout_ms, retry_policy=retry_policy,
            max_response_bytes=max_response_bytes, model=model,
            stream_idle_timeout_ms=stream_idle_timeout_ms)
        self.base_url = resolve_base_url(base_url, "ANTHROPIC_BASE_URL", DEFAULT_BASE_URL)
        self._make_transport(endpoint(self.base_url, "/v1/messages"),
                             MessagesCodec(self.base_url), options)

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:
        return request_body(request, stream=self.stream, entries=self._entries)

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use: ``POST /v1/messages/count_tokens``
        (free; the same model, system, messages and tools)."""
        return self._count(request, dump_body(count_body(self._own_model(request))),
                           endpoint(self.base_url, "/v1/messages/count_tokens"), "input_tokens")

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        key, token = self._api_key, self._auth_token
        if key is None and token is None:
            key = secret_from_env("ANTHROPIC_API_KEY")
            token = secret_from_env("ANTHROPIC_AUTH_TOKEN")
        if key is None and token is None:
            raise AuthenticationError(
                "no API key: pass api_key= or set ANTHROPIC_API_KEY", status_code=None
            )
        auth = {"anthropic-version": API_VERSION}
        if key is not None:
            auth["x-api-key"] = key
        if token is not None:
            auth["authorization"] = f"Bearer {token}"
        return self._json_headers(auth, key, token)
