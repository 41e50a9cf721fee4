"""``OpenAIChatClient``: the Chat Completions codec on the shared HTTP transport.

For any server that speaks OpenAI's Chat Completions (OpenAI, Azure OpenAI, Groq,
OpenRouter, Mistral, DeepSeek, vLLM, Ollama, llama.cpp, LiteLLM, ...). The history keeps
the Messages shape; ``chat_wire.py`` translates requests and replies, ``chat_stream.py``
assembles streamed chunks, ``http.py`` does the I/O exactly as for ``AnthropicClient``.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)
from urllib.parse import urlsplit

from ..errors import APIConnectionError, APIStatusError
from .base import ModelRequest, ReplyDict
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .chat_stream import parse_chat_stream
from .chat_wire import Translations, chat_body, reply_from_completion
from .client import DEFAULT_MAX_RESPONSE_BYTES, HTTPModelClient
from .http import EventCallback
from .options import check_secret, resolve_base_url, secret_from_env
from .retry import RetryPolicy
from .status import add_hint, error_from_response, load_json
from .urls import endpoint, shown_url

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["OpenAIChatClient", "DEFAULT_OPENAI_BASE_URL"]

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
_TOKEN_FIELDS = ("max_completion_tokens", "max_tokens")


class OpenAICodec:
    """What the Chat Completions and Responses codecs share: JSON replies, OpenAI's error
    bodies and request id header, and a hint added to a 404 (``hint_404``). A codec names
    its wire functions (class attributes, so a reply costs no extra call)."""

    api = "OpenAI API"
    request_id_header = "x-request-id"
    reply_from_json: Callable[[Any], ReplyDict]
    parse_stream: Callable[[Iterator[bytes], Optional[EventCallback], int], ReplyDict]

    def read_json(self, content: bytes) -> ReplyDict:
        try:
            body = load_json(content)
        except ValueError as exc:
            raise APIConnectionError(
                f"malformed JSON response ({exc}): {content[:200]!r}") from None
        return self.reply_from_json(body)

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback],
                    limit: int) -> ReplyDict:
        return self.parse_stream(chunks, on_event, limit)

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        error = error_from_response(status, headers, content, secrets,
                                    request_id_header=self.request_id_header)
        hint = self.hint_404() if status == 404 else ""
        if hint:
            add_hint(error, hint)
        return error

    def hint_404(self) -> str:
        """What a 404 likely means here ("" for nothing to add)."""
        return ""


class ChatCodec(OpenAICodec):
    """How the transport reads Chat Completions replies and errors."""

    api = "Chat Completions API"
    reply_from_json = staticmethod(reply_from_completion)
    parse_stream = staticmethod(parse_chat_stream)

    def __init__(self, base_url: str, url: str) -> None:
        self.base_url = base_url
        self.url = url

    def hint_404(self) -> str:
        if urlsplit(self.base_url).path.endswith("/v1"):
            return ""
        return (f"the client posted to {shown_url(self.url)}; most servers serve Chat "
                "Completions under /v1, so base_url usually ends in /v1")


class OpenAIChatClient(HTTPModelClient):
    """Calls ``POST {base_url}/chat/completions``; a ``ModelClient`` for ``lattice.Agent``.

    One client (and its pooled ``requests.Session``) may be shared by any number of
    threads and agents.

    Args:
        api_key: sent as ``Authorization: Bearer``; default ``OPENAI_API_KEY`` (read at
            each call). None and no variable: no header (local servers need none).
            Surrounding whitespace is stripped; control characters inside are refused.
        base_url: default ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``.
        max_retries: retries of 408/409/429/5xx and failed connections.
        stream: use SSE streaming (default) rather than one JSON response.
        default_headers: extra headers for every request (they win over ours); e.g.
            Azure's ``{"api-key": ...}``.
        default_query: URL parameters for every request, e.g. Azure's
            ``{"api-version": "2024-10-21"}``.
        session: a ``requests.Session`` to use instead of the client's own.
        timeout_ms: deadline of one ``create()`` (retries included) when the request has
            none; without either, connect 10 s and read 600 s per attempt.
        max_tokens_field: the body key for ``ModelRequest.max_tokens``:
            ``"max_completion_tokens"`` (default) or ``"max_tokens"`` for servers that
            only know that one.
        retry_policy: a ``RetryPolicy``; it replaces ``max_retries`` when given.
        model: the model id this client always sends (a request's ``model`` is then
            ignored), e.g. one client of a ``FallbackModelClient``; default: the request's.
        max_response_bytes: the most one response body, SSE line or SSE event may hold
            (decoded); beyond it the call fails with ``APIConnectionError`` and the
            response is closed. Default 32 MiB. A streamed reply's content (text,
            reasoning, tool arguments) may add up to no more than this either.
        stream_idle_timeout_ms: as ``AnthropicClient``.
    """

    provider_name = "openai"  # gen_ai.provider.name in traces

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        max_retries: int = 2,
        stream: bool = True,
        default_headers: Optional[Mapping[str, str]] = None,
        default_query: Optional[Mapping[str, Any]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        max_tokens_field: str = "max_completion_tokens",
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
        model: Optional[str] = None,
    ) -> None:
        self._api_key = check_secret("api_key", api_key)
        options = self._check_options(
            stream=stream, max_retries=max_retries, default_headers=default_headers,
            session=session, timeout_ms=timeout_ms, retry_policy=retry_policy,
            max_response_bytes=max_response_bytes, model=model,
            stream_idle_timeout_ms=stream_idle_timeout_ms)
        query = _check_query(default_query)
        if max_tokens_field not in _TOKEN_FIELDS:
            raise ValueError(f"max_tokens_field must be one of {list(_TOKEN_FIELDS)}, "
                             f"got {max_tokens_field!r}")
        self.base_url = resolve_base_url(base_url, "OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL)
        self.max_tokens_field = max_tokens_field
        url = endpoint(self.base_url, "/chat/completions", query)
        self._cache = Translations()  # what earlier requests translated (chat_wire)
        self._make_transport(url, ChatCodec(self.base_url, url), options)

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:
        return chat_body(request, stream=self.stream,
                         max_tokens_field=self.max_tokens_field, cache=self._cache,
                         entries=self._entries)

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        key = self._api_key or secret_from_env("OPENAI_API_KEY")
        return self._json_headers({} if key is None else {"authorization": f"Bearer {key}"}, key)


def _check_query(query: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    if query is None:
        return {}
    if not isinstance(query, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
            for k, v in query.items()):
        raise ValueError("default_query must be a mapping of str to str (or numbers)")
    return {k: str(v) for k, v in query.items()}
