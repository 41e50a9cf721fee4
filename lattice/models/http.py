"""The one HTTP stack of lattice, over ``requests``: model clients and MCP servers alike.

This is the only module that imports ``requests`` (lazily, on first use, so that
``import lattice`` stays free of it), and the one place its exceptions become lattice's
(``transport_failure``). ``new_session`` makes every session lattice owns (proxies and CA
bundle read once; connections that report which call owns them). A model client is a
codec (what a reply or an error looks like; see ``Codec``) on a ``Transport`` (session,
retries, deadlines, cutting, bounded reads); ``body.py`` reads bodies, ``urls.py`` keeps
URL secrets out of what is shown. ``lattice.mcp`` uses ``new_session``,
``transport_failure``, ``body.read_body`` and ``cutoff.HeldCall`` directly.

Extension points for a new provider (never a second transport):

* ``send(..., sign=fn)``: ``fn(url, body, headers)`` returns the headers of *each*
  attempt (retries included), e.g. with a SigV4 signature over the time, URL and body;
* ``send(..., url=...)``: a per-call URL (a model id in the path);
* ``Codec.stream_type``: the content type read with ``Codec.read_stream`` (default
  ``text/event-stream``; Bedrock's ``application/vnd.amazon.eventstream``), which gets
  the raw byte chunks and ``limit`` (``max_response_bytes``: no frame, line or event may
  be larger). See ``codec.py``.

Cancelling a blocked read: an abort or the request deadline shuts the socket down from
the thread that fires (see ``cutoff.py``), so the reading thread's ``recv`` returns at
once and we raise the signal's reason or ``RequestTimeoutError``. To know the socket
before the response headers arrive, sessions we create use connection and pool classes
that report which call owns which connection. A session given by the user is honoured
as is; there a call can be cut only once the headers came.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
)

from ..cancellation import call_later
from ..errors import AbortError, APIConnectionError, APIError, APIStatusError, RequestTimeoutError
from .base import ModelRequest, ReplyDict
from .body import DEFAULT_MAX_RESPONSE_BYTES, finish_stream, read_body, read_chunks
from .budget import DEFAULT_IDLE_TIMEOUT_MS, ReplyBudget, bound_silence, idle_error, watch_idle
from .codec import Codec, EventCallback, Signer
from .cutoff import HeldCall, attach, cut_if_needed, detach
from .retry import RetryPolicy, status_is_retryable
from .status import clean_request_id, readable, valid_header_value
from .urls import hide_queries_from_urllib3, redact, redact_error, shown_url, url_secrets

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["Codec", "Transport", "EventCallback", "Signer", "new_session",
           "transport_failure", "transport_errors", "DEFAULT_MAX_RESPONSE_BYTES"]

_log = logging.getLogger("lattice")

_CONNECT_TIMEOUT, _READ_TIMEOUT = 10.0, 600.0
_SSE = "text/event-stream"
_POOL_SIZE = 64  # one pooled connection per concurrently calling thread, up to this many

class Transport:
    """POSTs to one URL with retries, a deadline and an abort signal; thread-safe.

    Args:
        url: the full endpoint URL (query string included).
        codec: reads replies and errors.
        session: a ``requests.Session`` to use instead of our own (made on first use).
        retry_policy: when and how long to wait before retrying.
        timeout_ms: the default deadline of one ``send()`` (retries included).
        max_response_bytes: the most one body, SSE line or event may hold (decoded), and
            the most a streamed reply's content may add up to (``budget.py``).
        stream_idle_timeout_ms: how long a stream may go without progressing (None:
            no limit but the deadline and the socket's read timeout).
    """

    def __init__(self, url: str, codec: Codec, *, session: Optional[requests.Session],
                 retry_policy: RetryPolicy, timeout_ms: Optional[float],
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS) -> None:
        self.url = url
        self.shown_url = shown_url(url)  # password and query values: never shown
        self.url_secrets = url_secrets(url)
        self.codec = codec
        self.retry_policy = retry_policy
        self.timeout_ms = timeout_ms
        self.max_response_bytes = max_response_bytes
        self.stream_idle_timeout_ms = stream_idle_timeout_ms
        self.own_session = session is None
        self.session = session
        self._lock = threading.Lock()  # guards session and _calls
        self._calls: Set[HeldCall] = set()  # in flight: close() cuts them
        hide_queries_from_urllib3(url)

    def get_session(self) -> requests.Session:
        session = self.session
        if session is None:
            with self._lock:
                if self.session is None:
                    self.session = new_session(self.url)
                session = self.session
        return session

    def close(self) -> None:
        """End the calls in flight (``APIConnectionError``, their connections closed) and
        close our own session (a session given by the user is left open)."""
        with self._lock:
            calls = list(self._calls)
            session = self.session if self.own_session else None
            if self.own_session:
                self.session = None
        for call in calls:
            call.cut("closed")
        if session is not None:
            session.close()

    def send(self, request: ModelRequest, body: bytes, headers: Dict[str, str],
             secrets: List[str], streaming: bool, *, url: Optional[str] = None,
             sign: Optional[Signer] = None,
             read_json: Optional[Callable[[bytes], ReplyDict]] = None) -> ReplyDict:
        """POST ``body``; return the codec's reply (nothing partial), retrying as allowed.

        ``url`` replaces the transport's URL for this call (Bedrock: the model is in the
        path); ``sign`` makes each attempt's headers; ``read_json`` replaces the codec's
        reading of a 2xx JSON body (another endpoint of the API: count_tokens)."""
        signal = request.signal
        signal.throw_if_aborted()
        target = url or self.url
        shown = self.shown_url if url is None else shown_url(url)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s request: POST %s (model %s, %d bytes, %s)", self.codec.api,
                       shown, request.model, len(body),
                       "streaming" if streaming else "not streaming")
        policy = self.retry_policy
        timeout_ms = request.timeout_ms or self.timeout_ms
        deadline = policy.clock() + timeout_ms / 1000.0 if timeout_ms else None
        every = self.url_secrets if url is None else url_secrets(url)
        call = HeldCall(request, sorted({*secrets, *every}, key=len, reverse=True), deadline)
        cancel_timer = call_later(timeout_ms / 1000.0, call.expire) if timeout_ms else None
        signal.add_callback(call.abort)
        with self._lock:
            self._calls.add(call)
        call.activate()
        try:
            retries = 0
            while True:
                if deadline is not None and policy.clock() >= deadline:
                    raise RequestTimeoutError(f"model request timed out after {timeout_ms} ms",
                                              kind="request")
                try:
                    attempt = headers if sign is None else sign(target, body, headers)
                    return self._attempt(call, target, shown, body, attempt, streaming,
                                         read_json)
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
        except (APIError, RequestTimeoutError, AbortError, ValueError) as error:
            # SPEC 21b: what caused it (a requests exception naming the URL whole, query
            # secrets and all) does not travel with it; its type name is in the message.
            error.__cause__ = error.__context__ = None
            error.__suppress_context__ = True
            raise
        finally:
            signal.remove_callback(call.abort)
            if cancel_timer is not None:
                cancel_timer()
            with self._lock:
                self._calls.discard(call)
            call.finish()

    def _post(self, call: HeldCall, url: str, shown: str, body: bytes,
              headers: Dict[str, str]) -> requests.Response:
        """Send one attempt; ``_Retry`` if it never got an answer."""
        timeout = (_CONNECT_TIMEOUT, _READ_TIMEOUT)
        if call.deadline is not None:
            remaining = max(0.001, call.deadline - self.retry_policy.clock())
            timeout = (min(_CONNECT_TIMEOUT, remaining), remaining)
        session = self.get_session()
        try:
            return session.post(url, data=body, headers=headers, timeout=timeout, stream=True)
        except transport_errors() as exc:
            failure = self._failure(call, exc, shown, headers=headers)
            if isinstance(failure, APIConnectionError) and call.cause is None:
                raise _Retry(failure, {}) from exc
            raise failure from exc

    def _attempt(self, call: HeldCall, url: str, shown: str, body: bytes,
                 headers: Dict[str, str], streaming: bool,
                 read_json: Optional[Callable[[bytes], ReplyDict]] = None) -> ReplyDict:
        clock, deadline, codec = self.retry_policy.clock, call.deadline, self.codec
        limit = self.max_response_bytes
        response = self._post(call, url, shown, body, headers)
        call.response = response
        try:
            if call.cause is not None:  # cut while a session we did not make was connecting
                raise self._failure(call, APIConnectionError("cut before the response"), shown)
            status = response.status_code
            if status >= 300:
                error = codec.error(status, response.headers,
                                    read_body(response, limit, deadline, clock), call.secrets)
                if status_is_retryable(status, response.headers):
                    raise _Retry(error, _with_hint(response.headers, error))
                raise error
            kind = response.headers.get("content-type", "")
            if streaming and getattr(codec, "stream_type", _SSE) in kind:
                budget, idle_ms = ReplyBudget(limit), self.stream_idle_timeout_ms
                bound_silence(response, idle_ms)
                chunks = read_chunks(response, deadline, clock)
                on_event = call.request.on_event if call.request is not None else None
                reply = codec.read_stream(watch_idle(chunks, budget, idle_ms, clock),
                                          on_event, budget)
                finish_stream(response, chunks, transport_errors(), clock)
                return reply
            return (read_json or codec.read_json)(read_body(response, limit, deadline, clock))
        except transport_errors() as exc:
            idle_ms = self.stream_idle_timeout_ms
            if (streaming and idle_ms is not None and call.cause is None
                    and is_timeout_of(exc) == "read" and not self._past(call.deadline)):
                raise idle_error(idle_ms) from None  # silent past the idle limit
            raise self._failure(call, exc, shown, "the response broke off") from exc
        except APIError as error:  # a cut stream, bad data, an error event, too large
            if call.cause is not None:
                raise self._failure(call, error, shown) from error
            redact_error(error, call.secrets)  # its body too: an error event may echo the key
            if error.request_id is None:
                error.request_id = clean_request_id(
                    response.headers.get(codec.request_id_header), call.secrets)
            raise
        finally:
            response.close()

    def _past(self, deadline: Optional[float]) -> bool:
        return deadline is not None and self.retry_policy.clock() >= deadline - 0.01

    def _failure(self, call: HeldCall, exc: BaseException, shown: str,
                 what: str = "connection error", headers: Optional[Mapping[str, str]] = None
                 ) -> BaseException:
        """The lattice error to raise for ``exc`` (a cut wins over what it caused)."""
        if call.cause == "abort" and call.request is not None:
            reason = call.request.signal.reason
            return reason if isinstance(reason, BaseException) else AbortError(str(reason))
        if call.cause == "closed":
            return APIConnectionError(f"the client was closed during the call ({shown})")
        if call.cause == "timeout" or (call.deadline is not None and is_timeout_of(exc)
                                       and self.retry_policy.clock() >= call.deadline - 0.01):
            return RequestTimeoutError("model request timed out", kind="request")
        session = self.session  # (None after close(): not made again for a message)
        every = {**(dict(session.headers) if session is not None else {}), **(headers or {})}
        return transport_failure(exc, api=self.codec.api, shown_url=shown,
                                 secrets=call.secrets, headers=every, what=what)


def transport_failure(exc: BaseException, *, api: str, shown_url: str, secrets: Sequence[str],
                      headers: Optional[Mapping[str, Any]] = None,
                      what: str = "connection error") -> BaseException:
    """The lattice error for a failed HTTP exchange: ``RequestTimeoutError`` (``kind``
    "connect" or "read"), ``APIConnectionError`` with a short readable reason, or a
    ``ValueError`` for a request that could not be sent (bad URL, bad header value).

    The one place ``requests``/``urllib3`` exceptions become lattice errors; lattice's own
    errors pass through unchanged.
    """
    if isinstance(exc, (APIError, RequestTimeoutError)):  # ours already (note: the
        return exc  # latter is an OSError, so ``except errors`` catches it too)
    timeout = is_timeout_of(exc)
    if timeout is not None:
        return RequestTimeoutError(f"{api} request timed out ({timeout}: {shown_url})",
                                   kind=timeout)
    import requests

    if isinstance(exc, requests.exceptions.InvalidHeader):
        # requests quotes the header value (a key!) in its message: never shown.
        names = [k for k, v in (headers or {}).items() if not valid_header_value(v)]
        return ValueError(f"{api} request not sent ({type(exc).__name__}): header(s) "
                          f"{names or '?'} have a value HTTP cannot carry, such as a line "
                          "break or surrounding whitespace (value not shown)")
    if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
                        requests.exceptions.MissingSchema)):
        return ValueError(f"{api} request not sent ({type(exc).__name__}): {shown_url!r} "
                          f"is not a URL requests can use ({redact(str(exc), secrets)})")
    reason = redact(readable(exc), secrets)
    return APIConnectionError(f"{what} ({shown_url}): {type(exc).__name__}: {reason}")


def _with_hint(headers: Mapping[str, str], error: APIError) -> Mapping[str, str]:
    """``headers``, plus the wait a codec read from the error body (Google's ``RetryInfo``:
    ``error.retry_after`` seconds) as ``retry-after`` when the headers name none."""
    hint = getattr(error, "retry_after", None)
    if not isinstance(hint, (int, float)) or "retry-after" in headers:
        return headers
    return {**headers, "retry-after": f"{hint:g}"}


class _Retry(Exception):
    """Internal: a failure before any of the reply arrived, which a retry may fix."""

    def __init__(self, error: APIError, headers: Mapping[str, str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.headers = headers


# -- the session every lattice-owned HTTP exchange uses ---------------------------------------


class _Owned:
    """Mixed into urllib3's connection classes: a connection starting a request belongs to
    the calling thread's active call (``cutoff.attach``), which may then cut it."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        attach(self)
        super().request(*args, **kwargs)  # type: ignore[misc]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        cut_if_needed(self)  # an abort that came while we were connecting


class _Returning:
    """Mixed into urllib3's pools: a connection back in its pool belongs to no call.

    ``_put_conn`` is urllib3's one place a connection goes back (no public hook exists);
    without this, a late cut could hit the connection after another call took it."""

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            detach(conn)
        super()._put_conn(conn)  # type: ignore[misc]


@functools.cache
def _adapter_class() -> Type[Any]:
    """The ``HTTPAdapter`` whose pools make ``_Owned`` connections; built once per process
    (on first use, since ``requests`` is imported lazily), shared by every session."""
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    conn = type("LatticeHTTPConnection", (_Owned, HTTPConnection), {})
    tls_conn = type("LatticeHTTPSConnection", (_Owned, HTTPSConnection), {})
    pools = {"http": type("LatticeHTTPPool", (_Returning, HTTPConnectionPool),
                          {"ConnectionCls": conn}),
             "https": type("LatticeHTTPSPool", (_Returning, HTTPSConnectionPool),
                           {"ConnectionCls": tls_conn})}

    class LatticeAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

    return LatticeAdapter


def new_session(url: str) -> requests.Session:
    """A ``requests.Session`` for calls to ``url``: proxies and CA bundle read from the
    environment once, connections a cut can reach (see ``cutoff.py``)."""
    import urllib.request

    import requests

    session = requests.Session()
    # Read the environment once, as httpx does, not on every request: requests' lookup
    # walks os.environ twice per call (~0.2 ms here). One client talks to one base URL,
    # so the no_proxy decision can be made now too.
    session.trust_env = False
    if not requests.utils.should_bypass_proxies(url, no_proxy=None):
        session.proxies.update(urllib.request.getproxies())
    env = os.environ
    if url.lower().startswith("https:"):
        # Only where it is used: requests stats a bundle path on every request (#39).
        session.verify = env.get("REQUESTS_CA_BUNDLE") or env.get("CURL_CA_BUNDLE") or True
    adapter = _adapter_class()(pool_connections=4, pool_maxsize=_POOL_SIZE)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


_TRANSPORT_ERRORS: Optional[Tuple[Type[BaseException], ...]] = None


def transport_errors() -> Tuple[Type[BaseException], ...]:
    """What a ``requests`` call may raise (catch these, then ``transport_failure``)."""
    global _TRANSPORT_ERRORS
    if _TRANSPORT_ERRORS is None:
        import requests
        import urllib3

        _TRANSPORT_ERRORS = (requests.RequestException, urllib3.exceptions.HTTPError, OSError)
    return _TRANSPORT_ERRORS


def is_timeout_of(exc: BaseException) -> Optional[str]:
    """"connect" or "read" when ``exc`` is (or wraps) a timeout, else None."""
    import requests
    import urllib3

    connect = (requests.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError)
    timeouts = (requests.Timeout, urllib3.exceptions.TimeoutError, socket.timeout)
    # requests wraps a read timeout met while streaming in a plain ConnectionError
    for item in (exc, *getattr(exc, "args", ()), getattr(exc, "reason", None)):
        if isinstance(item, connect):
            return "connect"
        if isinstance(item, timeouts):
            return "read"
    return None
