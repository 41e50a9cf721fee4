"""``GeminiClient`` and ``VertexGeminiClient``: Gemini's ``generateContent`` natively.

One codec on the shared transport (``http.py``): ``gemini_wire.py`` builds the body,
``gemini_reply.py`` reads a reply (one JSON object, a JSON array of chunks, or SSE
``data:`` events, CRLF-framed as Google sends them), ``gemini_status.py`` reads errors.
The Gemini API (AI Studio) takes the key in ``x-goog-api-key``, never in the URL; Vertex AI
takes the same body under ``projects/{p}/locations/{r}/publishers/google/models/{m}``
with a bearer token (``vertex.VertexCredentials``, as ``AnthropicVertexClient``).
Streaming always asks for ``alt=sse``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from ..errors import APIConnectionError, APIStatusError
from .base import ModelRequest, ReplyDict
from .body import DEFAULT_MAX_RESPONSE_BYTES, too_large
from .budget import DEFAULT_IDLE_TIMEOUT_MS, budget_of
from .client import HTTPModelClient
from .codec import EventCallback
from .entries import EntryBytes, dump
from .gemini_reply import GeminiReply, reply_from_gemini
from .gemini_status import gemini_error
from .gemini_wire import count_body, gemini_request, nests_media
from .options import check_secret, resolve_base_url, secret_from_env
from .retry import RetryPolicy
from .sse import json_scanner, load_data, sse_events
from .status import load_json
from .urls import shown_url
from .vertex import VertexCredentials, vertex_host, vertex_setting

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["GeminiClient", "VertexGeminiClient", "GeminiCodec", "DEFAULT_GEMINI_BASE_URL",
           "parse_gemini_stream"]

DEFAULT_GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
_VERSIONS = ("v1", "v1beta1")


def parse_gemini_stream(chunks: Iterator[bytes], on_event: Optional[EventCallback] = None,
                        limit: int = DEFAULT_MAX_RESPONSE_BYTES) -> ReplyDict:
    """Read an SSE stream of response chunks to its end; return the assistant dict. Each
    chunk goes to ``on_event`` as received; a stream that ends before a chunk with a
    ``finishReason`` (or a blocked prompt's feedback) was cut: ``APIConnectionError``."""
    reply = GeminiReply()
    scan = json_scanner()
    budget = budget_of(limit)  # its progress is what the idle limit watches (budget.py)
    total = 0  # the reply is bounded as a whole, not only each event (SPEC 21b)
    try:
        for sse in sse_events(chunks, limit):
            total += len(sse.data)
            if total > limit:
                raise too_large("the streamed reply", limit)
            chunk = load_data(sse, scan)
            if chunk is None:
                continue
            if on_event is not None:
                on_event(chunk)
            if reply.feed(chunk):  # a chunk that adds nothing is no progress (idle limit)
                budget.progress()
        if reply.finish is None and reply.blocked is None:
            raise APIConnectionError("the stream ended before the chunk with the finishReason")
        return reply.message()
    except BaseException:
        reply.release()  # the traceback keeps this frame: not what it gathered (SPEC 21b)
        raise


class GeminiCodec:
    """How the transport reads Gemini replies and errors (both APIs)."""

    request_id_header = "x-request-id"

    def __init__(self, api: str) -> None:
        self.api = api

    def read_json(self, content: bytes) -> ReplyDict:
        try:
            body = load_json(content)
        except ValueError as exc:
            raise APIConnectionError(
                f"malformed JSON response ({exc}): {content[:200]!r}") from None
        if isinstance(body, dict) and "totalTokens" in body and "candidates" not in body:
            return {"total_tokens": body["totalTokens"]}  # a countTokens reply
        return reply_from_gemini(body)

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback],
                    limit: int) -> ReplyDict:
        return parse_gemini_stream(chunks, on_event, limit)

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Any) -> APIStatusError:
        return gemini_error(status, headers, content, secrets)


class _GeminiBase(HTTPModelClient):
    """What both clients share: the body, the method in the URL, ``count_tokens``."""

    _vertex = False

    def _model_url(self, model: str, method: str) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def create(self, request: ModelRequest) -> ReplyDict:
        """Send one request; return the assistant dict (nothing partial)."""
        request.signal.throw_if_aborted()
        body = gemini_request(request, self._entries if nests_media(request.model)
                              else self._entries_older)
        url = self._model_url(request.model or "", "streamGenerateContent?alt=sse"
                              if self.stream else "generateContent")
        return self._send(request, body, self.stream, url=url)

    @property
    def _entries_older(self) -> EntryBytes:
        """The encoded entries for models before Gemini 3 (a tool's images go apart)."""
        return self._entry_cache("_older_entry_bytes")

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use (``:countTokens``; nothing generated)."""
        request.signal.throw_if_aborted()
        body = count_body(request, vertex=self._vertex)
        url = self._model_url(request.model or "", "countTokens")
        reply = self._send(request, dump(body), False, url=url)
        total = reply.get("total_tokens")
        if not isinstance(total, int):
            raise APIConnectionError("countTokens answered without totalTokens")
        return total


class GeminiClient(_GeminiBase):
    """Gemini through the Gemini API (Google AI Studio); a ``ModelClient`` for
    ``lattice.Agent``. Thread-safe.

    Args:
        api_key: sent as ``x-goog-api-key`` (never in the URL); default ``GEMINI_API_KEY``,
            else ``GOOGLE_API_KEY`` (read at each call).
        base_url: default ``GEMINI_BASE_URL``, else
            ``https://generativelanguage.googleapis.com``; with or without ``/v1beta``.
        stream: stream the reply (``:streamGenerateContent?alt=sse``, the default) rather
            than one JSON response (``:generateContent``).
        max_retries, default_headers, session, timeout_ms, retry_policy,
            max_response_bytes, stream_idle_timeout_ms: as ``AnthropicClient``.

    ``ModelRequest.extra`` is merged into the body: ``{"generationConfig": {...}}`` joins
    ours (``thinkingConfig``, ``temperature``, ...), ``{"tools": [{"googleSearch": {}}]}``
    adds built-in tools, ``safetySettings``, ``toolConfig`` and the like are sent as given.
    """

    provider_name = "gcp.gemini"

    def __init__(
        self,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        stream: bool = True,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
    ) -> None:
        self._api_key = check_secret("api_key", api_key)
        options = self._check_options(
            stream=stream, max_retries=max_retries, default_headers=default_headers,
            session=session, timeout_ms=timeout_ms, retry_policy=retry_policy,
            max_response_bytes=max_response_bytes,
            stream_idle_timeout_ms=stream_idle_timeout_ms)
        url = resolve_base_url(base_url, "GEMINI_BASE_URL", DEFAULT_GEMINI_BASE_URL)
        self.base_url = url[: -len("/v1beta")] if url.endswith("/v1beta") else url
        self._make_transport(self.base_url, GeminiCodec("Gemini API"), options)

    def _model_url(self, model: str, method: str) -> str:
        return f"{self.base_url}/v1beta/models/{_model_id(model)}:{method}"

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        key = self._api_key or secret_from_env("GEMINI_API_KEY") or secret_from_env(
            "GOOGLE_API_KEY")
        return self._json_headers({"x-goog-api-key": key} if key else {}, key)


class VertexGeminiClient(VertexCredentials, _GeminiBase):
    """Gemini on Google Vertex AI; a ``ModelClient`` for ``lattice.Agent``. Thread-safe.

    Args:
        project_id: default ``GOOGLE_CLOUD_PROJECT``.
        region: default ``GOOGLE_CLOUD_LOCATION``, else ``global`` (the global endpoint,
            ``https://aiplatform.googleapis.com``).
        access_token, token_provider: as ``AnthropicVertexClient`` (without either,
            Google application-default credentials through ``google-auth``).
        api_version: ``"v1"`` (default) or ``"v1beta1"``.
        base_url: default ``VERTEX_GEMINI_BASE_URL``, else
            ``https://{region}-aiplatform.googleapis.com``; with or without the version.
        stream, max_retries, default_headers, session, timeout_ms, retry_policy,
            max_response_bytes, stream_idle_timeout_ms: as ``GeminiClient``.
    """

    provider_name = "gcp.vertex_ai"
    _vertex = True

    def __init__(
        self,
        *,
        project_id: Optional[str] = None,
        region: Optional[str] = None,
        access_token: Optional[str] = None,
        token_provider: Optional[Callable[[], str]] = None,
        api_version: str = "v1",
        base_url: Optional[str] = None,
        stream: bool = True,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
    ) -> None:
        self._init_credentials(access_token, token_provider)
        if api_version not in _VERSIONS:
            raise ValueError(f"api_version must be one of {_VERSIONS}, got {api_version!r}")
        self.api_version = api_version
        self.project_id = vertex_setting(project_id, "project_id", "GOOGLE_CLOUD_PROJECT")
        self.region = "global" if region is None and not os.environ.get(
            "GOOGLE_CLOUD_LOCATION", "").strip() else vertex_setting(
                region, "region", "GOOGLE_CLOUD_LOCATION")
        options = self._check_options(
            stream=stream, max_retries=max_retries, default_headers=default_headers,
            session=session, timeout_ms=timeout_ms, retry_policy=retry_policy,
            max_response_bytes=max_response_bytes,
            stream_idle_timeout_ms=stream_idle_timeout_ms)
        url = resolve_base_url(base_url, "VERTEX_GEMINI_BASE_URL", vertex_host(self.region))
        for version in _VERSIONS:
            if url.endswith("/" + version):
                if version != api_version:  # never a silent switch to the other version
                    raise ValueError(f"base_url {shown_url(url)!r} ends in /{version} but "
                                     f"api_version is {api_version!r}: pass "
                                     f"api_version={version!r}, or a base_url without it")
                url = url[: -len(version) - 1]
        self.base_url = url
        self._make_transport(self.base_url, GeminiCodec("Vertex AI"), options)

    def _model_url(self, model: str, method: str) -> str:
        return (f"{self.base_url}/{self.api_version}/projects/{self.project_id}/locations/"
                f"{self.region}/publishers/google/models/{_model_id(model)}:{method}")

    def __repr__(self) -> str:
        return (f"VertexGeminiClient(project_id={self.project_id!r}, region={self.region!r}, "
                f"api_version={self.api_version!r}, base_url={self.base_url!r}, "
                f"stream={self.stream}, max_retries={self.retry_policy.max_retries}, "
                f"timeout_ms={self.timeout_ms!r})")


def _model_id(model: str) -> str:
    """The model id for the URL (``models/`` in front, as Google names them, is dropped)."""
    if not model:
        raise ValueError("Gemini clients need ModelRequest.model (the model name)")
    model = model[len("models/"):] if model.startswith("models/") else model
    if any(c in model for c in "/?#: ") or not model.isascii():
        raise ValueError(f"model {model!r} is not a Gemini model id")
    return model

