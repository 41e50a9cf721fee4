"""``AnthropicClient``: the built-in Messages API client over ``requests``.

This is the only module that imports ``requests`` (lazily, on first use, so that
``import lattice`` stays free of it), and the one place its exceptions are translated
into lattice's. JSON shapes live in ``wire.py``, SSE in ``sse.py``, retry rules in
``retry.py``.

Cancelling a blocked read: an abort or the request deadline shuts the socket down from
the thread that fires (see ``cutoff.py``), so the reading thread's ``recv`` returns at
once and we raise the signal's reason or ``RequestTimeoutError``. To know the socket
before the response headers arrive, sessions we create use connection and pool classes
that report which call owns which connection. A session given by the user is honoured
as is; there a call can be cut only once the headers came.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Tuple, Type

from .._version import __version__
from ..cancellation import call_later
from ..errors import (
    AbortError,
    APIConnectionError,
    APIError,
    APIStatusError,
    AuthenticationError,
    RequestTimeoutError,
)
from .base import ModelRequest, ReplyDict
from .cutoff import HeldCall, attach, cut_if_needed, detach
from .retry import RetryPolicy
from .sse import parse_stream
from .wire import error_from_response, message_from_json, redact, reply_from_message, request_body

if TYPE_CHECKING:  # pragma: no cover
    import requests

__all__ = ["AnthropicClient", "DEFAULT_BASE_URL", "API_VERSION"]

_log = logging.getLogger("lattice")

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_CONNECT_TIMEOUT, _READ_TIMEOUT = 10.0, 600.0
_POOL_SIZE = 64  # one pooled connection per concurrently calling thread, up to this many
_CHUNK = 1 << 16
_END_GRACE = 0.1  # s a finished stream may take to end its body before we hang up


def _bad_number(value: Any, minimum: float, strict: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return value <= minimum if strict else value < minimum


class AnthropicClient:
    """Calls ``POST {base_url}/v1/messages``; a ``ModelClient`` for ``lattice.Agent``.

    One client (and its pooled ``requests.Session``) may be shared by any number of
    threads and agents.

    Args:
        api_key: sent as ``x-api-key``; default ``ANTHROPIC_API_KEY`` (read at each call).
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
    """

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
    ) -> None:
        for name, secret in (("api_key", api_key), ("auth_token", auth_token)):
            if secret is not None and (not isinstance(secret, str) or not secret.strip()):
                raise ValueError(f"{name} must be a non-empty string or None")  # no value shown
        problems = [
            ("max_retries", max_retries, "an int >= 0",
             not isinstance(max_retries, int) or _bad_number(max_retries, 0, False)),
            ("stream", stream, "True or False", not isinstance(stream, bool)),
            ("timeout_ms", timeout_ms, "a positive number or None",
             timeout_ms is not None and _bad_number(timeout_ms, 0, True)),
            ("default_headers", default_headers, "a mapping of str to str",
             default_headers is not None and (
                 not isinstance(default_headers, Mapping) or not all(
                     isinstance(k, str) and isinstance(v, str)
                     for k, v in default_headers.items()))),
            ("session", session, "a requests.Session",
             session is not None and not callable(getattr(session, "post", None))),
            ("retry_policy", retry_policy, "a RetryPolicy",
             retry_policy is not None and not isinstance(retry_policy, RetryPolicy)),
        ]
        for name, value, wanted, bad in problems:
            if bad:
                raise ValueError(f"{name} must be {wanted}, got {value!r}")
        url = base_url if base_url is not None else os.environ.get("ANTHROPIC_BASE_URL") or ""
        url = url.strip() or DEFAULT_BASE_URL
        if not re.match(r"https?://[^/]", url):
            raise ValueError(f"base_url must be an http(s) URL, got {url!r}")
        self.base_url = url.rstrip("/")
        self.stream = stream
        self.timeout_ms = timeout_ms
        self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        self._api_key = api_key
        self._auth_token = auth_token
        self._default_headers = dict(default_headers or {})
        self._own_session = session is None
        self._session = session
        self._lock = threading.Lock()
        self._url = self.base_url + "/v1/messages"

    def __repr__(self) -> str:
        return (
            f"AnthropicClient(base_url={self.base_url!r}, stream={self.stream}, "
            f"max_retries={self.retry_policy.max_retries}, timeout_ms={self.timeout_ms!r})"
        )

    def close(self) -> None:
        """Close the client's own session (a session given by the user is left open)."""
        if self._own_session:
            with self._lock:
                session, self._session = self._session, None
            if session is not None:
                session.close()

    def __enter__(self) -> AnthropicClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- the call ------------------------------------------------------------------
    def create(self, request: ModelRequest) -> ReplyDict:
        """Send one Messages API request; return the assistant dict (nothing partial)."""
        signal = request.signal
        signal.throw_if_aborted()
        headers, secrets = self._headers()
        body, streaming = request_body(request, stream=self.stream)
        policy = self.retry_policy
        timeout_ms = request.timeout_ms or self.timeout_ms
        deadline = policy.clock() + timeout_ms / 1000.0 if timeout_ms else None
        call = HeldCall(request, secrets, deadline)
        cancel_timer = call_later(timeout_ms / 1000.0, call.expire) if timeout_ms else None
        signal.add_callback(call.abort)
        call.activate()
        try:
            retries = 0
            while True:
                if deadline is not None and policy.clock() >= deadline:
                    raise RequestTimeoutError(f"model request timed out after {timeout_ms} ms")
                try:
                    return self._attempt(call, body, headers, streaming)
                except _Retry as failure:
                    error, cause = failure.error, failure.__cause__
                    status = error.status_code if isinstance(error, APIStatusError) else None
                    if not policy.should_retry(retries, status, failure.headers):
                        raise error from cause
                    delay = policy.delay(retries, failure.headers)
                    if deadline is not None and policy.clock() + delay >= deadline:
                        raise error from cause  # waiting would outlive the deadline
                    retries += 1
                    _log.info("Messages API request failed (%s); retry %d of %d in %.2f s",
                              error, retries, policy.max_retries, delay)
                    if policy.sleep is not None:
                        policy.sleep(delay)
                    else:
                        signal.wait(delay)  # an abort ends the wait at once
                    signal.throw_if_aborted()
        finally:
            signal.remove_callback(call.abort)
            if cancel_timer is not None:
                cancel_timer()
            call.finish()

    def _attempt(self, call: HeldCall, body: bytes, headers: Dict[str, str], streaming: bool
                 ) -> ReplyDict:
        clock, deadline = self.retry_policy.clock, call.deadline
        timeout = (_CONNECT_TIMEOUT, _READ_TIMEOUT)
        if deadline is not None:
            remaining = max(0.001, deadline - clock())
            timeout = (min(_CONNECT_TIMEOUT, remaining), remaining)
        errors = _transport_errors()
        session = self._get_session()
        try:
            response = session.post(self._url, data=body, headers=headers, timeout=timeout,
                                    stream=True)
        except errors as exc:
            failure = _failure(call, exc)
            if isinstance(failure, APIConnectionError):
                raise _Retry(failure, {}) from exc
            raise failure from exc
        call.response = response
        try:
            if call.cause is not None:  # cut while a session we did not make was connecting
                raise _failure(call, APIConnectionError("cut before the response"))
            if response.status_code >= 300:
                raise _Retry(error_from_response(response.status_code, response.headers,
                                                 response.content, call.secrets),
                             response.headers)
            if streaming and "text/event-stream" in response.headers.get("content-type", ""):
                chunks = _chunks(response, deadline, clock)
                message = parse_stream(chunks, call.request.on_event)
                _finish_stream(response, chunks, errors, clock)
            else:
                message = message_from_json(response.content)
            return reply_from_message(message)
        except errors as exc:
            raise _failure(call, exc, "the response broke off") from exc
        except APIError as error:  # a cut stream, bad data, an error event
            if call.cause is not None:
                raise _failure(call, error) from error
            if error.request_id is None:
                error.request_id = response.headers.get("request-id")
            raise
        finally:
            response.close()

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        key, token = self._api_key, self._auth_token
        if key is None and token is None:
            key = os.environ.get("ANTHROPIC_API_KEY") or None
            token = os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
        if key is None and token is None:
            raise AuthenticationError(
                "no API key: pass api_key= or set ANTHROPIC_API_KEY", status_code=None
            )
        headers = {
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "application/json",
            "user-agent": f"agent-lattice/{__version__}",
        }
        if key is not None:
            headers["x-api-key"] = key
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        headers.update(self._default_headers)
        # Redact only key-like strings: a toy key such as "k" would mangle every message.
        return headers, [s for s in (key, token) if s and len(s) >= 8]

    def _get_session(self) -> requests.Session:
        session = self._session
        if session is None:
            with self._lock:
                if self._session is None:
                    self._session = _new_session(self.base_url)
                session = self._session
        return session


# -- reading responses ------------------------------------------------------------------


class _Retry(Exception):
    """Internal: a failure before any of the reply arrived, which a retry may fix."""

    def __init__(self, error: APIError, headers: Mapping[str, str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


def _chunks(response: Any, deadline: Optional[float], clock: Any) -> Iterator[bytes]:
    raw = response.raw
    read1 = getattr(raw, "read1", None)
    if read1 is not None and not getattr(raw, "chunked", True):
        # Without chunked encoding, iter_content blocks until a whole chunk is filled;
        # read1 hands over what has arrived.
        source: Iterator[bytes] = iter(lambda: read1(_CHUNK, decode_content=True) or b"", b"")
    else:
        source = response.iter_content(_CHUNK)
    for chunk in source:
        yield chunk
        # A server that trickles bytes never trips the read timeout: check the wall.
        if deadline is not None and clock() > deadline:
            raise RequestTimeoutError("model request timed out while streaming")


def _finish_stream(response: Any, chunks: Iterator[bytes],
                   errors: Tuple[Type[BaseException], ...], clock: Any) -> None:
    """After ``message_stop``: read the end of the body if it is already on its way, so
    the connection goes back to the pool; a server that keeps the body open (pings after
    ``message_stop``) gets ``_END_GRACE`` s, then the response is closed (``close()`` in
    ``_attempt`` drops a connection whose body was not read to the end)."""
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    if sock is None:
        return  # nothing to bound a read with: close rather than risk waiting
    end, previous = clock() + _END_GRACE, sock.gettimeout()
    try:
        sock.settimeout(_END_GRACE)
        for _ in chunks:
            if clock() > end:
                return
    except (RequestTimeoutError,) + errors:  # the reply is complete; the rest is noise
        pass
    finally:  # a pooled connection may send its next request with it (older urllib3)
        with contextlib.suppress(OSError):
            sock.settimeout(previous)


def _failure(call: HeldCall, exc: BaseException, what: str = "connection error"
             ) -> BaseException:
    """The lattice error to raise for ``exc`` (a cut wins over what it caused)."""
    if call.cause == "abort":
        reason = call.request.signal.reason
        return reason if isinstance(reason, BaseException) else AbortError(str(reason))
    if call.cause == "timeout":
        return RequestTimeoutError("model request timed out")
    if isinstance(exc, (APIError, RequestTimeoutError)):  # ours already (note: the latter
        return exc  # is an OSError, so ``except errors`` catches it too)
    if _is_timeout(exc):
        return RequestTimeoutError("model request timed out")
    return APIConnectionError(redact(f"{what}: {exc}", call.secrets))


_TRANSPORT_ERRORS: Optional[Tuple[Type[BaseException], ...]] = None


def _transport_errors() -> Tuple[Type[BaseException], ...]:
    global _TRANSPORT_ERRORS
    if _TRANSPORT_ERRORS is None:
        import requests
        import urllib3

        _TRANSPORT_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError, OSError)
    return _TRANSPORT_ERRORS


def _is_timeout(exc: BaseException) -> bool:
    import requests
    import urllib3

    timeouts = (requests.Timeout, urllib3.exceptions.TimeoutError, socket.timeout)
    if isinstance(exc, timeouts):
        return True
    # requests wraps a read timeout met while streaming in a plain ConnectionError
    return any(isinstance(arg, timeouts) for arg in getattr(exc, "args", ()))


def _new_session(base_url: str) -> requests.Session:
    import urllib.request

    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class _Owned:
        def request(self, *args: Any, **kwargs: Any) -> None:
            attach(self)
            super().request(*args, **kwargs)  # type: ignore[misc]

        def connect(self) -> None:
            super().connect()  # type: ignore[misc]
            cut_if_needed(self)  # an abort that came while we were connecting

    class _Returning:
        def _put_conn(self, conn: Any) -> None:
            if conn is not None:
                detach(conn)
            super()._put_conn(conn)  # type: ignore[misc]

    class _Conn(_Owned, HTTPConnection):
        pass

    class _TLSConn(_Owned, HTTPSConnection):
        pass

    class _Pool(_Returning, HTTPConnectionPool):
        ConnectionCls = _Conn

    class _TLSPool(_Returning, HTTPSConnectionPool):
        ConnectionCls = _TLSConn

    class _Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}

    session = requests.Session()
    # Read the environment once, as httpx does, not on every request: requests' lookup
    # walks os.environ twice per call (~0.2 ms here). One client talks to one base URL,
    # so the no_proxy decision can be made now too.
    session.trust_env = False
    if not requests.utils.should_bypass_proxies(base_url, no_proxy=None):
        session.proxies.update(urllib.request.getproxies())
    env = os.environ
    session.verify = env.get("REQUESTS_CA_BUNDLE") or env.get("CURL_CA_BUNDLE") or True
    adapter = _Adapter(pool_connections=4, pool_maxsize=_POOL_SIZE)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
