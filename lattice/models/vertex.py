"""``AnthropicVertexClient``: the Messages API through Google Vertex AI.

A codec plus a signer on the shared transport: the Anthropic codec (``wire.py``, SSE
from ``sse.py``) with the model in the URL (``:rawPredict`` / ``:streamRawPredict``), a
body without ``model`` and with Vertex's ``anthropic_version``, and a bearer token: the
given ``access_token``, a ``token_provider()`` called for every request (it caches; after a
401 it is called once more and the request retried once), or Google application-default
credentials through ``google-auth`` (``pip install 'agent-lattice[vertex]'``), imported
only when that path is taken.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..errors import APIStatusError, AuthenticationError
from .anthropic import MessagesCodec
from .base import ModelRequest, ReplyDict
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .client import HTTPModelClient
from .options import REGION_NAME, check_secret, check_version, resolve_base_url, secrets_of
from .retry import RetryPolicy
from .status import error_from_response
from .wire import count_body, dump_body, request_dict

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["AnthropicVertexClient", "VERTEX_VERSION", "VertexCredentials", "vertex_setting",
           "vertex_host"]

VERTEX_VERSION = "vertex-2023-10-16"
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


class VertexCodec(MessagesCodec):
    """The Messages codec; errors may also come in Google's ``{"error": {"code",
    "message", "status"}}`` shape, which ``error_from_response`` reads."""

    api = "Vertex AI"

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Any) -> APIStatusError:
        return error_from_response(status, headers, content, secrets)


def vertex_setting(value: Optional[str], option: str, variable: str) -> str:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{option} must be a non-empty str or None, got {value!r}")
    found = (value or os.environ.get(variable) or "").strip()
    if not found:
        raise ValueError(f"{option}: pass {option}= or set {variable}")
    if "/" in found or "?" in found or "#" in found:
        raise ValueError(f"{option} {found!r} cannot hold '/', '?' or '#'")
    if option == "region" and not REGION_NAME.fullmatch(found):  # it goes in the host
        raise ValueError(f"region must be a Google Cloud region name (letters, digits and "
                         f"dashes, such as 'us-central1' or 'global'), got {found!r}")
    return found


def vertex_host(region: str) -> str:
    """Vertex AI's endpoint for ``region`` (``global`` has no region in the host)."""
    return ("https://aiplatform.googleapis.com" if region == "global"
            else f"https://{region}-aiplatform.googleapis.com")


class VertexCredentials:
    """The credentials of both Vertex clients: a fixed ``access_token``, a
    ``token_provider()`` called for every request (after a 401 it is called once more), or
    Google application-default credentials through ``google-auth``."""

    _default_headers: Dict[str, str]
    _json_headers: Callable[..., Tuple[Dict[str, str], List[str]]]
    _ask_token: Callable[[Callable[[], Any]], str]  # HTTPModelClient's (tokens.py)

    def _init_credentials(self, access_token: Optional[str],
                          token_provider: Optional[Callable[[], str]]) -> None:
        self._access_token = check_secret("access_token", access_token)
        if token_provider is not None and not callable(token_provider):
            raise ValueError(f"token_provider must be a callable or None, got "
                             f"{type(token_provider).__name__}")
        if token_provider is not None and self._access_token is not None:
            raise ValueError("pass access_token or token_provider, not both")
        self._token_provider = token_provider
        if self._access_token is None and token_provider is None and not _has_google_auth():
            raise ValueError(f"{type(self).__name__} needs access_token=, token_provider=, or "
                             "google-auth for application-default credentials: pip install "
                             "'agent-lattice[vertex]'")
        self._google: Any = None
        self._google_lock = threading.Lock()

    def _fetches_credential(self) -> bool:
        """Without a fixed ``access_token``, Google's credentials may be refreshed by a
        call no signal reaches (so the client is not ``abortable``)."""
        return self._access_token is None

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        return self._signed(self._token(refresh=False))

    def _headers_after_401(self) -> Optional[Tuple[Dict[str, str], List[str]]]:
        # The token went stale under us: a provider's or Google's new one, not a fixed one.
        return None if self._access_token is not None else self._signed(self._token(refresh=True))

    def _token(self, *, refresh: bool) -> str:
        if self._access_token is not None:
            return self._access_token
        if self._token_provider is not None:
            return self._ask_token(self._token_provider)
        # google-auth is a token provider too (it may call the metadata server or an OAuth
        # endpoint): bounded by the request's deadline, its failures AuthenticationError
        return self._ask_token(lambda: self._google_token(refresh))

    def _google_token(self, refresh: bool) -> str:
        # the vertex extra; only this path needs it (no stubs: imported by name)
        google_auth: Any = importlib.import_module("google.auth")
        transport: Any = importlib.import_module("google.auth.transport.requests")
        with self._google_lock:
            if self._google is None:
                self._google, _ = google_auth.default(scopes=_SCOPES)
            credentials = self._google
            if refresh or not credentials.valid:
                credentials.refresh(transport.Request())
            token = credentials.token
        if not isinstance(token, str) or not token:
            raise AuthenticationError("Google application-default credentials gave no access "
                                      "token", status_code=None)
        return token

    def _signed(self, token: str) -> Tuple[Dict[str, str], List[str]]:
        headers, secrets = self._json_headers({})
        headers["authorization"] = f"Bearer {token}"
        headers.update(self._default_headers)
        return headers, sorted(set(secrets) | set(secrets_of({}, token)), key=len,
                               reverse=True)


class AnthropicVertexClient(VertexCredentials, HTTPModelClient):
    """Claude on Google Vertex AI; a ``ModelClient`` for ``lattice.Agent``. Thread-safe.

    Args:
        project_id: default ``ANTHROPIC_VERTEX_PROJECT_ID``.
        region: default ``CLOUD_ML_REGION``; ``global`` uses the global endpoint.
        access_token: a fixed OAuth access token (``Authorization: Bearer``).
        token_provider: ``() -> str``, called for every request (let it cache); after a
            401 it is called once more and the request sent once more (not counted
            against ``max_retries``).
        base_url: default ``ANTHROPIC_VERTEX_BASE_URL``, else
            ``https://{region}-aiplatform.googleapis.com`` (``https://aiplatform.googleapis.com``
            for ``global``); with or without ``/v1``.
        stream, max_retries, default_headers, session, timeout_ms, retry_policy,
            max_response_bytes, stream_idle_timeout_ms, model: as ``AnthropicClient``.
        anthropic_version: the body's ``anthropic_version``: ``"vertex-2023-10-16"`` (the
            default) or a dated one (``"2023-06-01"``), as newer SDKs send.

    Without ``access_token`` and ``token_provider``, Google application-default
    credentials are used through ``google-auth`` (the ``vertex`` extra).
    """

    provider_name = "gcp.vertex_ai"

    def __init__(
        self,
        *,
        project_id: Optional[str] = None,
        region: Optional[str] = None,
        access_token: Optional[str] = None,
        token_provider: Optional[Callable[[], str]] = None,
        base_url: Optional[str] = None,
        stream: bool = True,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
        anthropic_version: str = VERTEX_VERSION,
        model: Optional[str] = None,
    ) -> None:
        self.anthropic_version = check_version(anthropic_version)
        self._init_credentials(access_token, token_provider)
        self.project_id = vertex_setting(project_id, "project_id", "ANTHROPIC_VERTEX_PROJECT_ID")
        self.region = vertex_setting(region, "region", "CLOUD_ML_REGION")
        options = self._check_options(
            stream=stream, max_retries=max_retries, default_headers=default_headers,
            session=session, timeout_ms=timeout_ms, retry_policy=retry_policy,
            max_response_bytes=max_response_bytes, model=model,
            stream_idle_timeout_ms=stream_idle_timeout_ms)
        url = resolve_base_url(base_url, "ANTHROPIC_VERTEX_BASE_URL", vertex_host(self.region))
        self.base_url = url[:-3] if url.endswith("/v1") else url
        self._make_transport(self.base_url, VertexCodec(self.base_url), options)

    def create(self, request: ModelRequest) -> ReplyDict:
        """Send one request; return the assistant dict (nothing partial)."""
        request.signal.throw_if_aborted()
        request = self._own_model(request)
        body, streaming = self._body(request)
        url = (f"{self.base_url}/v1/projects/{self.project_id}/locations/{self.region}/"
               f"publishers/anthropic/models/{request.model}:"
               f"{'streamRawPredict' if streaming else 'rawPredict'}")
        return self._send(request, body, streaming, url=url)

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use: Vertex's ``count-tokens:rawPredict``
        for Claude (free; the model named in the body)."""
        body = count_body(self._own_model(request))
        body.setdefault("anthropic_version", self.anthropic_version)
        url = (f"{self.base_url}/v1/projects/{self.project_id}/locations/{self.region}/"
               "publishers/anthropic/models/count-tokens:rawPredict")
        return self._count(request, dump_body(body), url, "input_tokens")

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:
        body = request_dict(request, stream=self.stream)
        body.pop("model", None)
        body.setdefault("anthropic_version", self.anthropic_version)
        return dump_body(body, self._entries), body.get("stream") is True

    def __repr__(self) -> str:
        return (f"AnthropicVertexClient(project_id={self.project_id!r}, region={self.region!r},"
                f" base_url={self.base_url!r}, stream={self.stream}, "
                f"max_retries={self.retry_policy.max_retries}, timeout_ms={self.timeout_ms!r})")


def _has_google_auth() -> bool:
    try:
        return importlib.util.find_spec("google.auth") is not None
    except (ImportError, ValueError):
        return False
