"""``OpenAIResponsesClient``: the Responses API codec on the shared HTTP transport.

``responses_wire.py`` translates requests and replies (``input`` items in, output items
out), ``responses_stream.py`` reads ``response.*`` events, ``http.py`` does the I/O
exactly as for the other clients (retries, deadlines, abort, secrets).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from .base import ModelRequest
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .chat_wire import Translations
from .client import HTTPModelClient
from .entries import dump
from .openai import DEFAULT_OPENAI_BASE_URL, OpenAICodec, _check_query
from .options import check_secret, resolve_base_url, secret_from_env, secrets_of
from .responses_stream import parse_responses_stream
from .responses_wire import reply_from_response, responses_body
from .retry import RetryPolicy
from .tokens import ask_provider
from .urls import endpoint

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["OpenAIResponsesClient", "ResponsesCodec", "responses_url", "bearer_token"]

TokenProvider = Callable[[], str]

# What /responses/input_tokens takes of a Responses body (no max_output_tokens, store,
# include, stream or sampling options).
_COUNT_KEYS = frozenset(("model", "input", "instructions", "tools", "text", "reasoning",
                         "tool_choice", "parallel_tool_calls", "previous_response_id",
                         "conversation", "truncation"))


class ResponsesCodec(OpenAICodec):
    """How the transport reads Responses API replies and errors."""

    api = "Responses API"
    reply_from_json = staticmethod(reply_from_response)
    parse_stream = staticmethod(parse_responses_stream)

    def __init__(self, url: str, hint: str = "") -> None:
        self.url = url
        self.hint = hint  # added to a 404 (likely a wrong base URL or deployment)

    def hint_404(self) -> str:
        return self.hint


def responses_url(base_url: str) -> str:
    """``{base}/v1/responses``, whether ``base_url`` ends in ``/v1`` or not (a query
    string in ``base_url`` keeps its place after the path)."""
    path = "/responses" if urlsplit(base_url).path.endswith("/v1") else "/v1/responses"
    return endpoint(base_url, path)


def bearer_token(provider: TokenProvider) -> str:
    """What ``provider()`` returns, checked (never shown in an error; ``tokens.py``)."""
    return ask_provider(provider)


class OpenAIResponsesClient(HTTPModelClient):
    """Calls ``POST {base_url}/v1/responses``; a ``ModelClient`` for ``lattice.Agent``.

    Reasoning items come back in the reply's ``openai_items`` key and are sent back with
    the next request (no other client sends them). One client (and its pooled
    ``requests.Session``) may be shared by any number of threads and agents.

    Args:
        api_key: sent as ``Authorization: Bearer``; default ``OPENAI_API_KEY`` (read at
            each call) unless ``token_provider`` or an ``api-key`` header is given.
        base_url: default ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``; with or
            without the ``/v1``.
        stream: use SSE streaming (default) rather than one JSON response.
        store: let OpenAI keep the responses (``store``). False (the default) asks for
            ``include: ["reasoning.encrypted_content"]``, so reasoning travels with the
            conversation instead.
        max_retries: retries of 408/409/429/5xx and failed connections.
        default_headers: extra headers for every request (they win over ours).
        default_query: URL parameters for every request.
        session: a ``requests.Session`` to use instead of the client's own.
        timeout_ms: deadline of one ``create()`` (retries included) when the request has
            none; without either, connect 10 s and read 600 s per attempt.
        retry_policy: a ``RetryPolicy``; it replaces ``max_retries`` when given.
        model: the model id this client always sends (a request's ``model`` is then
            ignored), e.g. one client of a ``FallbackModelClient``; default: the request's.
        token_provider: a callable returning a bearer token, called for every request
            (Microsoft Entra ID on Azure; the provider caches; after a 401 it is called
            once more and the request sent once more); ``api_key`` wins over it.
        max_response_bytes, stream_idle_timeout_ms: as ``OpenAIChatClient``.
    """

    provider_name = "openai"  # gen_ai.provider.name in traces

    def __init__(
        self,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        stream: bool = True,
        store: bool = False,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        default_query: Optional[Mapping[str, Any]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        token_provider: Optional[TokenProvider] = None,
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
        if not isinstance(store, bool):
            raise ValueError(f"store must be True or False, got {store!r}")
        if token_provider is not None and not callable(token_provider):
            raise ValueError(f"token_provider must be a callable returning a token, got "
                             f"{token_provider!r}")
        self._token_provider = token_provider
        query = _check_query(default_query)
        self.base_url = self._resolve_base_url(base_url)
        self.store = store
        url = self._url()
        self._query_secrets = secrets_of(dict(query))
        self._count_url = endpoint(url, "/input_tokens", query)
        self._cache = Translations()  # what earlier requests translated
        self._make_transport(endpoint(url, "", query), ResponsesCodec(url, self._hint()),
                             options)

    def _resolve_base_url(self, base_url: Optional[str]) -> str:
        return resolve_base_url(base_url, "OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL)

    def _url(self) -> str:
        return responses_url(self.base_url)

    def _hint(self) -> str:
        return ""

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:
        return responses_body(request, stream=self.stream, store=self.store,
                              cache=self._cache, entries=self._entries)

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use: ``POST /v1/responses/input_tokens``
        (the same model, input, instructions and tools)."""
        data, _ = responses_body(self._own_model(request), stream=False, store=True,
                                 cache=self._cache)
        body = {k: v for k, v in json.loads(data).items() if k in _COUNT_KEYS}
        return self._count(request, dump(body), self._count_url, "input_tokens")

    def _credentials(self) -> Tuple[Dict[str, str], List[str]]:
        """The auth header: our key, else the token provider's token, else the env key
        (not when an ``api-key`` header is configured: that key is for another host)."""
        key = self._api_key
        if self._token_provider is not None and self._asks_provider():
            token = self._ask_token(self._token_provider)
            return {"authorization": f"Bearer {token}"}, [token]
        if key is None and not any(k.lower() == "api-key" for k in self._default_headers):
            key = secret_from_env("OPENAI_API_KEY")
        return ({"authorization": f"Bearer {key}"}, [key]) if key else ({}, [])

    def _asks_provider(self) -> bool:
        """The credential is the token provider's (no key wins over it)."""
        return self._api_key is None and self._token_provider is not None

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        auth, secrets = self._credentials()
        return self._json_headers(auth, *secrets, *self._query_secrets)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", store={self.store})"
