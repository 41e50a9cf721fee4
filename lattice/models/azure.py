"""Azure OpenAI: the Chat and Responses codecs with Azure's URLs and credentials.

Azure is not a new client: ``AzureOpenAIChatClient`` is ``OpenAIChatClient`` posting to
``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=...`` and
``AzureOpenAIResponsesClient`` is ``OpenAIResponsesClient`` posting to
``{endpoint}/openai/v1/responses`` (or ``/openai/responses?api-version=...``). Both send
an ``api-key`` header, or ``Authorization: Bearer`` with a token from ``token_provider()``
(Microsoft Entra ID; called for every request, the provider caches; after a 401 it is
called once more and the request sent once more); ``api_key`` wins.
They never send ``OPENAI_API_KEY`` (that key is for api.openai.com).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import quote

from ..errors import APIStatusError, AuthenticationError
from .base import ModelRequest
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .chat_wire import chat_body
from .openai import ChatCodec, OpenAIChatClient
from .options import check_secret, resolve_base_url, secret_from_env
from .responses import OpenAIResponsesClient, TokenProvider, bearer_token
from .retry import RetryPolicy
from .status import add_hint

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["AzureOpenAIChatClient", "AzureOpenAIResponsesClient", "azure_credentials"]

_NO_CREDENTIALS = ("no Azure OpenAI credentials: pass api_key= or token_provider=, or set "
                   "AZURE_OPENAI_API_KEY")


def _endpoint(endpoint: Optional[str]) -> str:
    if endpoint is None and not (os.environ.get("AZURE_OPENAI_ENDPOINT") or "").strip():
        raise ValueError("endpoint is required (https://<resource>.openai.azure.com): pass "
                         "endpoint= or set AZURE_OPENAI_ENDPOINT")
    try:
        url = resolve_base_url(endpoint, "AZURE_OPENAI_ENDPOINT", "")
    except ValueError:
        raise ValueError(f"endpoint must be an http(s) URL (https://<resource>.openai."
                         f"azure.com), got {endpoint!r}") from None
    return url[: -len("/openai")] if url.endswith("/openai") else url


def _name(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{option} must be a non-empty string, got {value!r}")
    return value.strip()


def _provider(token_provider: Any) -> Optional[TokenProvider]:
    if token_provider is not None and not callable(token_provider):
        raise ValueError(f"token_provider must be a callable returning a token, got "
                         f"{token_provider!r}")
    return token_provider  # type: ignore[no-any-return]


def azure_credentials(api_key: Optional[str], token_provider: Optional[TokenProvider],
                      ask: Callable[[TokenProvider], str] = bearer_token
                      ) -> Tuple[Dict[str, str], List[str]]:
    """The auth header and its secret: ``api-key`` (the argument, which wins), else a
    bearer token from ``token_provider()`` (asked with ``ask``), else
    ``AZURE_OPENAI_API_KEY``."""
    if api_key is None and token_provider is not None:
        token = ask(token_provider)
        return {"authorization": f"Bearer {token}"}, [token]
    key = api_key or secret_from_env("AZURE_OPENAI_API_KEY")
    if key is None:
        raise AuthenticationError(_NO_CREDENTIALS, status_code=None)
    return {"api-key": key}, [key]


class _AzureAuth:
    """Both Azure clients' credentials: ``api_key``, else ``token_provider()`` (asked once
    more after a 401), else ``AZURE_OPENAI_API_KEY``."""

    _azure_key: Optional[str]
    _token_provider: Optional[TokenProvider]
    _ask_token: Callable[[TokenProvider], str]  # HTTPModelClient's

    def _asks_provider(self) -> bool:
        return self._azure_key is None and self._token_provider is not None

    def _credentials(self) -> Tuple[Dict[str, str], List[str]]:
        return azure_credentials(self._azure_key, self._token_provider, self._ask_token)


class _AzureChatCodec(ChatCodec):
    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        error = super().error(status, headers, content, [*secrets])
        if status == 404:
            add_hint(error, f"the client posted to {self.url}: check the endpoint, the "
                     "deployment name and api_version")
        return error


class AzureOpenAIChatClient(_AzureAuth, OpenAIChatClient):
    """Chat Completions on Azure OpenAI: a ``ModelClient`` for ``lattice.Agent``.

    Args:
        endpoint: ``https://<resource>.openai.azure.com``; default ``AZURE_OPENAI_ENDPOINT``.
        deployment: the deployment name (the model is the deployment's; a request without
            ``model`` sends the deployment name).
        api_version: e.g. ``"2024-10-21"``, sent as ``?api-version=``.
        api_key: sent as ``api-key``; default ``AZURE_OPENAI_API_KEY`` (read at each call)
            when there is no ``token_provider``.
        token_provider: a callable returning an Entra ID token, sent as a bearer token;
            called for every request (let it cache), and once more after a 401, when the
            request is sent once more (not counted against ``max_retries``).
        Others as ``OpenAIChatClient``.
    """

    provider_name = "azure.ai.openai"  # gen_ai.provider.name in traces

    def __init__(
        self,
        *,
        endpoint: Optional[str] = None,
        deployment: str,
        api_version: str,
        api_key: Optional[str] = None,
        token_provider: Optional[TokenProvider] = None,
        stream: bool = True,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        max_tokens_field: str = "max_completion_tokens",
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
    ) -> None:
        self.deployment = _name("deployment", deployment)
        self.api_version = _name("api_version", api_version)
        self._azure_key = check_secret("api_key", api_key)
        self._token_provider = _provider(token_provider)
        base = f"{_endpoint(endpoint)}/openai/deployments/{quote(self.deployment, safe='')}"
        super().__init__(None, base, max_retries=max_retries, stream=stream,
                         default_headers=default_headers,
                         default_query={"api-version": self.api_version}, session=session,
                         timeout_ms=timeout_ms, max_tokens_field=max_tokens_field,
                         retry_policy=retry_policy, max_response_bytes=max_response_bytes,
                         stream_idle_timeout_ms=stream_idle_timeout_ms)
        self._transport.codec = _AzureChatCodec(self.base_url, base + "/chat/completions")

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:
        if not request.model:
            request = replace(request, model=self.deployment)
        return chat_body(request, stream=self.stream, max_tokens_field=self.max_tokens_field,
                         cache=self._cache, entries=self._entries)

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        auth, secrets = self._credentials()
        return self._json_headers(auth, *secrets)

    def __repr__(self) -> str:
        return (f"AzureOpenAIChatClient(base_url={self.base_url!r}, deployment="
                f"{self.deployment!r}, api_version={self.api_version!r}, stream={self.stream})")


class AzureOpenAIResponsesClient(_AzureAuth, OpenAIResponsesClient):
    """The Responses API on Azure OpenAI: ``{endpoint}/openai/v1/responses`` (the v1 API,
    no ``api-version``), or ``{endpoint}/openai/responses?api-version=...`` when
    ``api_version`` is given. Credentials as ``AzureOpenAIChatClient``; the request's
    ``model`` is the deployment name. Others as ``OpenAIResponsesClient``."""

    provider_name = "azure.ai.openai"  # gen_ai.provider.name in traces

    def __init__(
        self,
        *,
        endpoint: Optional[str] = None,
        api_key: Optional[str] = None,
        token_provider: Optional[TokenProvider] = None,
        api_version: Optional[str] = None,
        stream: bool = True,
        store: bool = False,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
        model: Optional[str] = None,
    ) -> None:
        self.api_version = None if api_version is None else _name("api_version", api_version)
        self._endpoint = _endpoint(endpoint)
        self._azure_key = check_secret("api_key", api_key)
        super().__init__(stream=stream, store=store, max_retries=max_retries,
                         default_headers=default_headers, session=session,
                         timeout_ms=timeout_ms, retry_policy=retry_policy,
                         token_provider=_provider(token_provider), model=model,
                         max_response_bytes=max_response_bytes,
                         stream_idle_timeout_ms=stream_idle_timeout_ms,
                         default_query=None if self.api_version is None
                         else {"api-version": self.api_version})

    def _resolve_base_url(self, base_url: Optional[str]) -> str:
        return self._endpoint + ("/openai" if self.api_version else "/openai/v1")

    def count_tokens(self, request: ModelRequest) -> int:
        """Azure OpenAI has no ``/responses/input_tokens`` (it answers 404)."""
        raise NotImplementedError("AzureOpenAIResponsesClient: Azure OpenAI has no token "
                                  "counting endpoint (/responses/input_tokens is OpenAI's)")

    def _url(self) -> str:
        return self.base_url + "/responses"

    def _hint(self) -> str:
        return "check the endpoint, the deployment name (the model) and api_version"

