"""What every built-in HTTP client shares: the transport, the pooled session, the lifetime
(``close``/``with``), ``create`` and the options every client takes (``_check_options``:
stream, retries, timeout, headers, session, ``max_response_bytes``; ``_make_transport``).
A client adds its own options, its codec, the headers it sends and how a ``ModelRequest``
becomes a request body."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Tuple,
    TypeVar,
)

from .._version import __version__
from ..errors import APIConnectionError, AuthenticationError, RequestTimeoutError
from .base import ModelRequest, ReplyDict
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .entries import EntryBytes
from .http import Codec, Transport
from .options import check_client_options, clean_headers, require_requests, secrets_of
from .retry import RetryPolicy
from .tokens import ask_provider
from .urls import shown_url

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["HTTPModelClient", "TransportOptions", "check_max_bytes", "count_reader",
           "DEFAULT_MAX_RESPONSE_BYTES"]

C = TypeVar("C", bound="HTTPModelClient")
_log = logging.getLogger("lattice")
_USER_AGENT = f"agent-lattice/{__version__}"
# The deadline and signal of the request whose headers this thread is making: what a
# token provider's call is bounded by (``_ask_token``), without every ``_headers`` taking
# the request.
_asking = threading.local()


class TransportOptions(NamedTuple):
    """The checked options a client's ``Transport`` is made with."""

    session: Optional[requests.Session]
    retry_policy: RetryPolicy
    timeout_ms: Optional[float]
    max_response_bytes: int
    stream_idle_timeout_ms: Optional[float]


class HTTPModelClient:
    """Base of ``AnthropicClient`` and ``OpenAIChatClient``. One client (and its pooled
    ``requests.Session``) may be shared by any number of threads and agents."""

    base_url: str
    stream: bool
    model: Optional[str] = None  # the model this client always sends (None: the request's)
    _transport: Transport
    _default_headers: Dict[str, str]

    def _check_options(
        self, *, stream: Any, max_retries: Any, default_headers: Optional[Mapping[str, str]],
        session: Any, timeout_ms: Any, retry_policy: Any,
        max_response_bytes: Any = DEFAULT_MAX_RESPONSE_BYTES, model: Any = None,
        stream_idle_timeout_ms: Any = DEFAULT_IDLE_TIMEOUT_MS,
    ) -> TransportOptions:
        """Check the options every client takes (ValueError naming the first bad one),
        keep ``stream`` and the cleaned ``default_headers``, and return what the transport
        is made with (``_make_transport``, once the client knows its URL and codec)."""
        check_client_options(max_retries=max_retries, stream=stream, timeout_ms=timeout_ms,
                             session=session, retry_policy=retry_policy,
                             stream_idle_timeout_ms=stream_idle_timeout_ms)
        limit = check_max_bytes(max_response_bytes)
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ValueError(f"model must be a non-empty str or None, got {model!r}")
        self.model = model.strip() if model is not None else None
        self._default_headers = clean_headers(default_headers)
        require_requests(type(self).__name__)  # at construction, not at the first prompt
        self.stream = stream
        return TransportOptions(session, retry_policy or RetryPolicy(max_retries=max_retries),
                                timeout_ms, limit, stream_idle_timeout_ms)

    def _make_transport(self, url: str, codec: Codec, options: TransportOptions) -> None:
        self._transport = Transport(
            url, codec, session=options.session, retry_policy=options.retry_policy,
            timeout_ms=options.timeout_ms, max_response_bytes=options.max_response_bytes,
            stream_idle_timeout_ms=options.stream_idle_timeout_ms)

    @property
    def _entries(self) -> EntryBytes:
        """This client's encoded history entries (``entries.py``), made on first use."""
        return self._entry_cache("_entry_bytes")

    def _entry_cache(self, key: str) -> EntryBytes:
        """The encoded entries kept under ``key`` (a client encoding the history two ways
        keeps two), made on first use."""
        entries = self.__dict__.get(key)
        if entries is None:  # setdefault: two threads' first requests keep one
            entries = self.__dict__.setdefault(key, EntryBytes())
        return entries  # type: ignore[no-any-return]

    @property
    def abortable(self) -> bool:
        """Whether ``create`` returns soon after ``request.signal`` fires, or the request's
        deadline passes, from whichever thread fires it (so ``query()`` may call it on the
        consumer's thread, without a hand-off to a worker: docs/model-clients.md). True
        with the client's own session: the abort or the deadline shuts the socket down
        from the thread that fires (``cutoff.py``; the blocked read returns within a few
        ms). False with a session given by the user (cut only once the headers came) or a
        credential fetched by code lattice does not control (a token provider, Google's
        refresh)."""
        return (self._transport.own_session and not self._asks_provider()
                and not self._fetches_credential())

    def _fetches_credential(self) -> bool:
        """A request may first fetch a credential by a call no signal reaches (Vertex with
        Google's credentials): the default, no."""
        return False

    @property
    def max_response_bytes(self) -> int:
        """The most one response body, SSE line or event may hold (decoded bytes), and
        the most a streamed reply's content may add up to."""
        return self._transport.max_response_bytes

    @property
    def stream_idle_timeout_ms(self) -> Optional[float]:
        """How long a stream may go without progressing (None: no such limit)."""
        return self._transport.stream_idle_timeout_ms

    def create(self, request: ModelRequest) -> ReplyDict:
        """Send one request; return the assistant dict (nothing partial)."""
        request.signal.throw_if_aborted()
        request = self._own_model(request)
        body, streaming = self._body(request)
        return self._send(request, body, streaming)

    def _own_model(self, request: ModelRequest) -> ModelRequest:
        """``request`` with this client's ``model`` when it was built with one (SPEC 25a:
        a client of a ``FallbackModelClient`` sends its own model id)."""
        model = self.model
        if model is None or request.model == model:
            return request
        return dataclasses.replace(request, model=model)

    def _send(self, request: ModelRequest, body: bytes, streaming: bool, *,
              url: Optional[str] = None,
              read_json: Optional[Callable[[bytes], ReplyDict]] = None) -> ReplyDict:
        """POST ``body`` with this client's headers. A 401 to a token a provider gave is
        answered by asking for headers again (``_headers_after_401``: the provider asked
        once more) and sending once more, within what is left of the request's deadline;
        not a retry under the policy: a token that went stale under us is no server fault."""
        started = self.retry_policy.clock()
        limit = request.timeout_ms or self.timeout_ms
        deadline = started + limit / 1000.0 if limit else None
        with _bounded_by(deadline, request):
            headers, secrets = self._headers()
        try:
            return self._transport.send(request, body, headers, secrets, streaming, url=url,
                                        read_json=read_json)
        except AuthenticationError as exc:
            if exc.status_code != 401:
                raise
            with _bounded_by(deadline, request):
                fresh = self._headers_after_401()
            if fresh is None:  # a fixed key or token: a second try would fail the same way
                raise
            _log.info("%s: 401 to the token provider's token; sending once more with the "
                      "token it gives now", type(self).__name__)
        if limit:
            left = limit - (self.retry_policy.clock() - started) * 1000.0
            if left <= 0:
                raise RequestTimeoutError(f"model request timed out after {limit} ms")
            request = dataclasses.replace(request, timeout_ms=max(1, int(left)))
        return self._transport.send(request, body, *fresh, streaming, url=url,
                                    read_json=read_json)

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use, counted by the provider's endpoint
        (SPEC 25); a client whose service has none raises ``NotImplementedError``. No
        tokenizer is ever downloaded."""
        raise NotImplementedError(f"{type(self).__name__}: the service has no token "
                                  "counting endpoint lattice can call")

    def _count(self, request: ModelRequest, body: bytes, url: str, field: str) -> int:
        """POST ``body`` to a counting endpoint (retries, deadline, abort and secrets as
        for ``create``) and read the int in the reply's ``field``."""
        request.signal.throw_if_aborted()
        reply = self._send(request, body, False, url=url, read_json=count_reader(field))
        return int(reply[field])

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _headers_after_401(self) -> Optional[Tuple[Dict[str, str], List[str]]]:
        """After a 401: the headers with a token asked for again (``_headers`` calls the
        provider), or None when the credential is fixed."""
        return self._headers() if self._asks_provider() else None

    def _asks_provider(self) -> bool:
        """The credential comes from a token provider (no key wins over it): the default,
        no."""
        return False

    def _ask_token(self, provider: Callable[[], Any]) -> str:
        """``provider()``'s token (``tokens.py``), bounded by the deadline and signal of
        the request being sent on this thread."""
        deadline, request = getattr(_asking, "limits", (None, None))
        return ask_provider(provider, deadline=deadline,
                            signal=request.signal if request is not None else None,
                            clock=self.retry_policy.clock)

    def _json_headers(self, auth: Dict[str, str], *secrets: Optional[str]
                      ) -> Tuple[Dict[str, str], List[str]]:
        """Every client's headers: JSON in and out, our user agent, ``auth`` (the
        provider's credential headers), then ``default_headers``, which win; and the
        secrets to redact (``secrets`` and the default headers' values)."""
        headers = {"content-type": "application/json", "accept": "application/json",
                   "user-agent": _USER_AGENT}
        headers.update(auth)
        headers.update(self._default_headers)
        return headers, secrets_of(self._default_headers, *secrets)

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:  # pragma: no cover
        raise NotImplementedError

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._transport.retry_policy

    @property
    def timeout_ms(self) -> Optional[float]:
        return self._transport.timeout_ms

    @property
    def _session(self) -> Optional[requests.Session]:
        return self._transport.session

    def _get_session(self) -> requests.Session:
        return self._transport.get_session()

    def close(self) -> None:
        """End calls in flight (``APIConnectionError``) and close the client's own
        session (a session given by the user is left open). The client may be used
        again: a new session is made."""
        self._transport.close()

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(base_url={shown_url(self.base_url)!r}, "
                f"stream={self.stream}, "
                f"max_retries={self.retry_policy.max_retries}, timeout_ms={self.timeout_ms!r})")


def count_reader(field: str) -> Callable[[bytes], ReplyDict]:
    """Reads a counting endpoint's 2xx body: ``{field: <int>}`` (``APIConnectionError``
    for anything else)."""

    def read(content: bytes) -> ReplyDict:
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        count = data.get(field) if isinstance(data, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise APIConnectionError(f"malformed token count response (no int {field!r}): "
                                     f"{content[:200]!r}")
        return {field: count}

    return read
@contextlib.contextmanager
def _bounded_by(deadline: Optional[float], request: ModelRequest) -> Iterator[None]:
    before = getattr(_asking, "limits", None)
    _asking.limits = (deadline, request)
    try:
        yield
    finally:
        _asking.limits = before if before is not None else (None, None)


def check_max_bytes(value: Any, option: str = "max_response_bytes") -> int:
    """``value`` if it is a positive int (bytes), else ValueError naming ``option``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{option} must be a positive int (bytes), got {value!r}")
    return value
