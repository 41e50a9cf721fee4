"""The HTTP transport every built-in client shares, over ``requests``.

This is the only module that imports ``requests`` (lazily, on first use, so that
``import lattice`` stays free of it), and the one place its exceptions are translated
into lattice's. A client is a codec (what to send, how to read a reply or an error; see
``Codec``) on a ``Transport`` (session, retries, deadlines, cutting); ``body.py`` reads
a streamed body's chunks.

Cancelling a blocked read: an abort or the request deadline shuts the socket down from
the thread that fires (see ``cutoff.py``), so the reading thread's ``recv`` returns at
once and we raise the signal's reason or ``RequestTimeoutError``. To know the socket
before the response headers arrive, sessions we create use connection and pool classes
that report which call owns which connection. A session given by the user is honoured
as is; there a call can be cut only once the headers came.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Type,
)

from ..cancellation import call_later
from ..errors import AbortError, APIConnectionError, APIError, APIStatusError, RequestTimeoutError
from .base import ModelRequest, ReplyDict
from .body import finish_stream, read_chunks
from .cutoff import HeldCall, attach, cut_if_needed, detach
from .retry import RetryPolicy
from .status import clean_request_id, redact

if TYPE_CHECKING:  # pragma: no cover
    import requests

__all__ = ["Codec", "Transport", "EventCallback", "Signer"]

_log = logging.getLogger("lattice")

_CONNECT_TIMEOUT, _READ_TIMEOUT = 10.0, 600.0
_POOL_SIZE = 64  # one pooled connection per concurrently calling thread, up to this many

EventCallback = Callable[[Dict[str, Any]], None]
# (url, body, headers) -> the headers of one attempt: a signer (AWS SigV4) signs each
# attempt afresh, since the signature covers the time.
Signer = Callable[[str, bytes, Dict[str, str]], Dict[str, str]]


class Codec(Protocol):
    """One wire format, as the transport sees it (no I/O in any of these)."""

    api: str  # names the API in log lines, e.g. "Messages API"
    request_id_header: str  # e.g. "request-id" or "x-request-id"

    def read_json(self, content: bytes) -> ReplyDict:
        """The assistant dict in a 2xx JSON body."""

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback]
                    ) -> ReplyDict:
        """The assistant dict in an SSE body; stops reading once the reply is complete."""

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        """The error for an HTTP error status."""


class Transport:
    """POSTs to one URL with retries, a deadline and an abort signal; thread-safe.

    Args:
        url: the full endpoint URL (query string included).
        codec: reads replies and errors.
        session: a ``requests.Session`` to use instead of our own (made on first use).
        retry_policy: when and how long to wait before retrying.
        timeout_ms: the default deadline of one ``send()`` (retries included).
    """

    def __init__(self, url: str, codec: Codec, *, session: Optional[requests.Session],
                 retry_policy: RetryPolicy, timeout_ms: Optional[float]) -> None:
        self.url = url
        self.shown_url = url.split("?", 1)[0]  # a query may hold a key: never logged
        self.codec = codec
        self.retry_policy = retry_policy
        self.timeout_ms = timeout_ms
        self.own_session = session is None
        self.session = session
        self._lock = threading.Lock()

    def get_session(self) -> requests.Session:
        session = self.session
        if session is None:
            with self._lock:
                if self.session is None:
                    self.session = _new_session(self.url)
                session = self.session
        return session

    def close(self) -> None:
        """Close our own session (a session given by the user is left open)."""
        if self.own_session:
            with self._lock:
                session, self.session = self.session, None
            if session is not None:
                session.close()

    def send(self, request: ModelRequest, body: bytes, headers: Dict[str, str],
             secrets: List[str], streaming: bool, *, url: Optional[str] = None,
             sign: Optional[Signer] = None) -> ReplyDict:
        """POST ``body``; return the codec's reply (nothing partial), retrying as allowed.

        ``url`` replaces the transport's URL for this call (Bedrock: the model is in the
        path); ``sign`` makes each attempt's headers."""
        url = url or self.url
        signal = request.signal
        signal.throw_if_aborted()
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s request: POST %s (model %s, %d bytes, %s)", self.codec.api,
                       url.split("?", 1)[0], request.model, len(body),
                       "streaming" if streaming else "not streaming")
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
                    attempt_headers = headers if sign is None else sign(url, body, headers)
                    return self._attempt(call, body, attempt_headers, streaming, url)
                except _Retry as failure:
                    error, cause = failure.error, failure.__cause__
                    status = error.status_code if isinstance(error, APIStatusError) else None
                    if not policy.should_retry(retries, status, failure.headers):
                        raise error from cause
                    delay = policy.delay(retries, failure.headers)
                    if deadline is not None and policy.clock() + delay >= deadline:
                        raise error from cause  # waiting would outlive the deadline
                    retries += 1
                    _log.info("%s request failed (%s); retry %d of %d in %.2f s",
                              self.codec.api, error, retries, policy.max_retries, delay)
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

    def _attempt(self, call: HeldCall, body: bytes, headers: Dict[str, str], streaming: bool,
                 url: str) -> ReplyDict:
        clock, deadline, codec = self.retry_policy.clock, call.deadline, self.codec
        timeout = (_CONNECT_TIMEOUT, _READ_TIMEOUT)
        if deadline is not None:
            remaining = max(0.001, deadline - clock())
            timeout = (min(_CONNECT_TIMEOUT, remaining), remaining)
        errors = _transport_errors()
        session = self.get_session()
        try:
            response = session.post(url, data=body, headers=headers, timeout=timeout,
                                    stream=True)
        except errors as exc:
            failure = self._failure(call, exc, headers=headers)
            if isinstance(failure, APIConnectionError):
                raise _Retry(failure, {}) from exc
            raise failure from exc
        call.response = response
        try:
            if call.cause is not None:  # cut while a session we did not make was connecting
                raise self._failure(call, APIConnectionError("cut before the response"))
            if response.status_code >= 300:
                raise _Retry(codec.error(response.status_code, response.headers,
                                         response.content, call.secrets), response.headers)
            stream_type = getattr(codec, "stream_type", "text/event-stream")
            if streaming and stream_type in response.headers.get("content-type", ""):
                chunks = read_chunks(response, deadline, clock)
                reply = codec.read_stream(chunks, call.request.on_event)
                finish_stream(response, chunks, errors, clock)
                return reply
            return codec.read_json(response.content)
        except errors as exc:
            raise self._failure(call, exc, "the response broke off") from exc
        except APIError as error:  # a cut stream, bad data, an error event
            if call.cause is not None:
                raise self._failure(call, error) from error
            if error.request_id is None:
                error.request_id = clean_request_id(
                    response.headers.get(codec.request_id_header), call.secrets)
            raise
        finally:
            response.close()

    def _failure(self, call: HeldCall, exc: BaseException, what: str = "connection error",
                 headers: Optional[Mapping[str, str]] = None) -> BaseException:
        """The lattice error to raise for ``exc`` (a cut wins over what it caused).

        The one place ``requests``/``urllib3`` exceptions become lattice errors.
        """
        if call.cause == "abort":
            reason = call.request.signal.reason
            return reason if isinstance(reason, BaseException) else AbortError(str(reason))
        if call.cause == "timeout":
            return RequestTimeoutError("model request timed out")
        if isinstance(exc, (APIError, RequestTimeoutError)):  # ours already (note: the
            return exc  # latter is an OSError, so ``except errors`` catches it too)
        if _is_timeout(exc):
            return RequestTimeoutError("model request timed out")
        import requests

        if isinstance(exc, requests.exceptions.InvalidHeader):
            # requests quotes the header value (a key!) in its message: never shown.
            names = [k for k, v in {**dict(self.get_session().headers), **(headers or {})}
                     .items() if not _valid_header_value(v)]
            return ValueError(f"{self.codec.api} request not sent: header(s) {names or '?'} "
                              "have a value HTTP cannot carry, such as a line break or "
                              "surrounding whitespace (value not shown)")
        if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                            requests.exceptions.MissingSchema)):
            return ValueError(f"{self.codec.api} request not sent: {self.shown_url!r} is not "
                              f"a URL requests can use ({redact(str(exc), call.secrets)})")
        reason = redact(_readable(exc), call.secrets)
        return APIConnectionError(f"{what} ({self.shown_url}): {reason}")


class _Retry(Exception):
    """Internal: a failure before any of the reply arrived, which a retry may fix."""

    def __init__(self, error: APIError, headers: Mapping[str, str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


# -- translating foreign exceptions ---------------------------------------------------------

_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>:?\s*")
_HEADER_OK = re.compile(r"^\S[^\r\n]*$|^$")


def _valid_header_value(value: Any) -> bool:
    return isinstance(value, (str, bytes)) and bool(
        _HEADER_OK.match(value if isinstance(value, str) else value.decode("latin-1")))


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: urllib3 ``.reason``, exception args, cause, context."""
    seen, todo = set(), [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner = [getattr(current, "reason", None), current.__cause__, current.__context__]
        inner += list(getattr(current, "args", ()))
        todo += [e for e in inner if isinstance(e, BaseException)]


def _readable(exc: BaseException) -> str:
    """A short reason for a failed connection, without urllib3's internals."""
    chain = list(_causes(exc))
    for item in chain:  # the OS's own words when there are some
        if isinstance(item, socket.gaierror):
            return f"cannot resolve the host name ({item.strerror or item})"
        if isinstance(item, OSError) and item.strerror and not isinstance(item, socket.timeout):
            return item.strerror
    import http.client

    for item in chain:
        if isinstance(item, http.client.HTTPException):
            return str(item) or type(item).__name__
    innermost = chain[-1]
    text = _OBJECT_REPR.sub("", str(innermost)).strip()
    return text or type(innermost).__name__


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
