"""The Streamable HTTP transport of ``MCPServerHTTP``.

It uses lattice's one HTTP stack (``lattice.models.http``): the same session factory
(proxies, CA bundle, connections a cut can reach), error mapping and bounded body readers
as the model clients. Every message is a POST. A request's POST runs in its own daemon
thread, which hands what comes back (one JSON body, or an SSE stream of messages ending
with the reply) to the JSON-RPC session, so the caller waits on the session like over
stdio, with its timeout and signal. A caller that gives up (timeout, signal) abandons its
POST: the connection is shut down at once (``cutoff.HeldCall``), so no thread or socket
outlives the call, even against a server that keeps the stream open with comments.
Notifications and our replies to the server are posted at once, in order (the server
must see ``notifications/initialized`` before the next request); a cancellation is
posted in the background, bounded to a second. After the handshake a GET stream (if the
server offers one) carries the server's own requests and notifications.

``requests`` is imported when a server starts. ``_lock`` guards ``_closed`` and ``_live``
(the exchanges in flight: by request id, the GET stream, and other posts); ``_session_id``
and ``_version`` are written during the handshake, before any other request is made.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..cancellation import call_later
from ..errors import APIError
from ..models.body import read_body, read_chunks
from ..models.cutoff import HeldCall
from ..models.options import secrets_of
from ..models.sse import iter_lines
from ..models.urls import hide_queries_from_urllib3, redact, shown_url, url_secrets
from ._errors import MCPError
from ._rpc import Message, RPCSession, logger
from ._server import MODERN_VERSIONS, Transport
from ._wire import MCPEvents, error_reply, method_headers

if TYPE_CHECKING:
    import requests

__all__ = ["HTTPTransport"]

_ACCEPT = "application/json, text/event-stream"
_CONNECT_S = 10.0
_DELETE_S = 2.0
_CANCEL_S = 0.9  # a cancellation's POST: the call it cancels is over, so only this long
_RELISTEN_S = 1.0  # before reopening a stream when the server gave no ``retry``
_MAX_RETRY_MS = 60000  # a larger ``retry`` is a broken server's, not a plan
_RESUMES = 5  # GETs with Last-Event-ID for one request's reply before it fails
_AUTH_TRIES = 4  # POSTs of one message with new credentials (a step-up needs two)
_CLOSE_S = 2.0  # close() waits this long at most for its threads to end
_GET = object()  # the key of the GET stream in _live


def _rpc_error_text(reply: Optional[Message], body: bytes) -> str:
    """The JSON-RPC error message of an HTTP error body (``reply``: its parsed error
    reply, if it is one), else the body's start."""
    if reply is None:
        return body[:200].decode("utf-8", "replace").strip()
    error = reply["error"]
    return f"{error.get('message')} (JSON-RPC error {error.get('code')})"


class HTTPTransport(Transport):
    def __init__(self, server: str, url: str, headers: Dict[str, str], timeout_ms: int,
                 max_bytes: int, auth: Any) -> None:
        from ..models import http as stack

        secrets = sorted({*secrets_of(headers), *url_secrets(url)}, key=len, reverse=True)
        self.session = RPCSession(server, self.send, abandon=self._abandon, secrets=secrets,
                                  more_secrets=auth.secrets if auth is not None else None)
        self._stack = stack
        self._http = stack.new_session(url)
        hide_queries_from_urllib3(url)
        self._url = url
        self._shown = shown_url(url)
        self._headers = headers
        self._auth = auth
        self._max = max_bytes
        self._timeout = (_CONNECT_S, timeout_ms / 1000.0 + _CONNECT_S)
        self._timeout_ms = timeout_ms
        self._session_id: Optional[str] = None
        self._version: Optional[str] = None
        self._modern = False
        self._renew: Any = None
        self._renewing = threading.Lock()
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._live: Dict[Any, List[HeldCall]] = {}
        self._threads: List[threading.Thread] = []
        self._listener: Optional[threading.Thread] = None

    def negotiated(self, version: str) -> None:
        self._version = version
        self._modern = version in MODERN_VERSIONS

    def probes_first(self) -> bool:
        return True

    def renew_with(self, handshake: Any) -> None:
        self._renew = handshake

    def _request_headers(self, message: Optional[Message] = None) -> Dict[str, str]:
        headers = dict(self._headers)
        headers["Accept"] = _ACCEPT
        headers["Content-Type"] = "application/json"
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        if self._version is not None:
            headers["MCP-Protocol-Version"] = self._version
        if self._modern and message is not None:
            headers.update(method_headers(message, self.header_params))
        if self._auth is not None:
            value = self._auth.authorization(self._url)
            if value is not None:
                headers["Authorization"] = value  # its token is in auth.secrets()
        return headers

    def _stream_headers(self, last_id: Optional[str]) -> Dict[str, str]:
        """A GET's headers: an SSE stream, resumed after ``last_id`` when there is one."""
        headers = self._request_headers()
        headers["Accept"] = "text/event-stream"
        del headers["Content-Type"]
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        return headers

    def _error(self, kind: str, text: str) -> MCPError:
        return MCPError(self.session.server, kind, redact(text, self.session.secrets))

    # -- sending ---------------------------------------------------------------------------
    def send(self, message: Message) -> None:
        failure = self.session.failure
        if failure is not None:
            raise failure
        if "method" in message and "id" in message:
            self._background(self._request, message)
        elif message.get("method") == "notifications/cancelled":
            self._background(self._cancel, message)
        else:
            self._post(message)

    def _background(self, target: Any, message: Message) -> None:
        thread = threading.Thread(target=target, args=(message,), daemon=True,
                                  name="lattice-mcp-http")
        with self._lock:
            if self._closed and message.get("method") != "notifications/cancelled":
                return
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _request(self, message: Message) -> None:
        request_id = message["id"]
        try:
            self._post(message)
        except MCPError as exc:
            self.session.fail_request(request_id, exc)
            return
        # The POST is over: if its reply was not in it, no reply will come.
        self.session.fail_request(request_id, self._error(
            "protocol", f"the response to {message['method']} ended without its JSON-RPC "
                        "reply"))

    def _cancel(self, message: Message) -> None:
        try:
            self._post(message, limit_s=_CANCEL_S)
        except MCPError:
            pass  # best effort: the caller has stopped waiting either way

    def _abandon(self, request_id: Any) -> None:
        """The caller stopped waiting for ``request_id``: end its exchange now."""
        with self._lock:
            calls = list(self._live.get(request_id, ()))
        for call in calls:
            call.cut("abort")

    def ready(self) -> None:
        """The handshake is over: open the GET stream at once (a request the server sends
        right away must find it open), unless one is still listening."""
        with self._lock:
            if self._closed or (self._listener is not None and self._listener.is_alive()):
                return
            thread = threading.Thread(target=self._listen, daemon=True,
                                      name="lattice-mcp-http-get")
            self._listener = thread
            self._threads.append(thread)
        thread.start()

    def _listen(self) -> None:
        """The GET stream: where a server sends requests and notifications of its own.
        A stream the server ends is opened again after its ``retry`` delay, with the
        last event id seen (so the server can replay what we missed)."""
        events = MCPEvents()
        while not self._stop.is_set():
            headers = self._stream_headers(events.last_id)
            try:
                ended = self._exchange("the GET stream", "GET", _GET, None, headers,
                                       (_CONNECT_S, None),
                                       lambda response: self._read_stream(response, events))
            except MCPError as exc:
                logger.debug("MCP server %r: the GET stream ended: %s", self.session.server,
                             exc)
                return
            if not ended:
                return  # 405: this server offers no such stream
            self._stop.wait(_retry_s(events))

    def _read_stream(self, response: requests.Response, events: MCPEvents) -> bool:
        kind = _media_type(response)
        if response.status_code >= 400 or kind != "text/event-stream":
            return False
        self._read_events(response, None, events)
        return True

    def _post(self, message: Message, limit_s: Optional[float] = None) -> None:
        what = message.get("method") or "a reply"
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        key = message["id"] if "method" in message and "id" in message else None
        renewed = False
        for _ in range(_AUTH_TRIES):
            again = self._exchange(what, "POST", key, body, self._request_headers(message),
                                   self._timeout,
                                   functools.partial(self._handle, what, message,
                                                     renewed=renewed), limit_s)
            if again == "renew":
                renewed = True
                self._start_again()
            elif again != "auth":
                return
        raise self._error("http", f"{what}: still refused after {_AUTH_TRIES} tries with "
                                  "new credentials")

    def _start_again(self) -> None:
        """The server forgot our session (404): begin a new one, once for all callers."""
        stale = self._session_id
        with self._renewing:
            if self._session_id != stale:
                return  # another caller renewed it already
            self._session_id = None
            logger.info("MCP server %r forgot the HTTP session: starting a new one",
                        self.session.server)
            self._renew(self._timeout_ms)

    def _exchange(self, what: str, verb: str, key: Any, body: Optional[bytes],
                  headers: Dict[str, str], timeout: Tuple[float, Optional[float]],
                  handle: Any, limit_s: Optional[float] = None) -> Any:
        """One HTTP exchange; ``handle(response)`` reads it. A request's (``key`` not
        None) is cut at once by ``_abandon`` or ``close``; any is cut after ``limit_s``.
        Failures become ``MCPError``."""
        call = HeldCall(None, self.session.secrets, None)
        with self._lock:
            if self._closed and limit_s is None:
                raise self._error("closed", f"{what} was abandoned: the server was closed")
            if key is not None:  # a cancellation (bounded by limit_s) may finish after close
                self._live.setdefault(key, []).append(call)
        stop_timer = call_later(limit_s, call.expire) if limit_s is not None else None
        call.activate()
        failure: Optional[MCPError] = None
        try:
            response = self._http.request(verb, self._url, data=body, headers=headers,
                                          stream=True, timeout=timeout)
            call.response = response
            try:
                return handle(response)
            finally:
                response.close()
        except self._stack.transport_errors() as exc:
            if call.cause is not None:  # abandoned or closed: the caller knows already
                failure = self._error("closed", f"{what} was abandoned")
            else:
                failed = "could not be sent" if call.response is None else "broke off"
                failure = self._error("http", str(self._stack.transport_failure(
                    exc, api="MCP", shown_url=self._shown, secrets=self.session.secrets,
                    headers=headers, what=f"{what} {failed}")))
        except APIError as exc:  # a body, line or event over max_response_bytes
            failure = self._error("protocol", f"{what}: {exc}")
        finally:
            if stop_timer is not None:
                stop_timer()
            with self._lock:
                calls = self._live.get(key)
                if calls is not None and call in calls:
                    calls.remove(call)
                    if not calls:
                        del self._live[key]
            cut = call.conn if call.cause is not None else None
            call.finish()
            if cut is not None:
                cut.close()  # shut down is not closed: the descriptor would stay open
        # Raised here, not in the except clause: an error raised there keeps the transport
        # error as its context, whose traceback holds the connection (and its socket) in a
        # reference cycle until a garbage collection, seconds or minutes later.
        raise failure

    def _handle(self, what: str, message: Message, response: requests.Response, *,
                renewed: bool) -> Optional[str]:
        status = response.status_code
        if status in (401, 403) and self._auth is not None:
            try:
                again = self._auth.challenge(self._url, status,
                                             response.headers.get("www-authenticate"))
            except BaseException as exc:  # OAuthFailure, or the application's redirect_handler
                # (which runs on this request's thread: a SystemExit it raises must reach the
                # caller as a failure, not end this thread and leave the caller waiting)
                said = str(exc) if isinstance(exc, Exception) else \
                    f"the redirect_handler raised {type(exc).__name__}"
                raise self._error("auth", f"{what}: authorization failed: {said}") from None
            if again:
                return "auth"
        if message.get("method") == "initialize" and status < 400:
            self._session_id = response.headers.get("mcp-session-id")
        if status == 404 and self._session_id is not None:
            if not renewed and self._renew is not None and message.get("method") not in (
                    "initialize", "notifications/initialized"):
                return "renew"
            # The server forgot our session (expired, restarted) again: it is over.
            self.session.fail("closed", "the server ended the HTTP session (404 for its "
                                        "Mcp-Session-Id); close() and start() begin a new one")
            failure = self.session.failure
            assert failure is not None
            raise failure
        if status >= 400:
            body = read_body(response, self._max)
            reply = error_reply(body)
            if reply is not None and "id" in message and "method" in message \
                    and reply.get("id") in (message["id"], None):
                reply["id"] = message["id"]
                self.session.receive(reply)  # its JSON-RPC error, code and data
                return None
            raise self._error("http", f"{what}: HTTP {status}: {_rpc_error_text(reply, body)}")
        kind = _media_type(response)
        if status == 202 or "id" not in message or "method" not in message:
            return None  # a notification or a reply: nothing comes back
        if kind == "text/event-stream":
            events = MCPEvents()
            if not self._read_events(response, message["id"], events):
                self._resume(what, message["id"], events)
        elif kind == "application/json":
            self.session.receive_data(read_body(response, self._max))
        else:
            raise self._error("protocol", f"{what}: unexpected content type "
                                          f"{kind or '(none)'!r}")
        return None

    def _resume(self, what: str, request_id: Any, events: MCPEvents) -> None:
        """The stream of a request ended before its reply: when the server numbered its
        events, ask for the rest with GET and ``Last-Event-ID`` after its ``retry``."""
        for _ in range(_RESUMES):
            if events.last_id is None or self._stop.wait(_retry_s(events)):
                return
            headers = self._stream_headers(events.last_id)

            def read(response: requests.Response) -> bool:
                kind = _media_type(response)
                if response.status_code >= 400 or kind != "text/event-stream":
                    return True  # nothing to resume from: the call fails as it stands
                return self._read_events(response, request_id, events)

            if self._exchange(f"{what} (resumed)", "GET", request_id, None, headers,
                              self._timeout, read):
                return

    def _read_events(self, response: requests.Response, request_id: Any,
                     events: MCPEvents) -> bool:
        """Hand each message of the stream to the session; True once ``request_id``'s
        reply came. Events without data (a server's priming event) carry nothing."""
        chunks = read_chunks(response, None, time.monotonic)
        for event in events.events(iter_lines(chunks, self._max), self._max):
            if event.event not in (None, "message") or not event.data.strip():
                continue
            if self.session.receive_data(event.data) == request_id is not None:
                return True  # our reply: the stream has nothing more for us
        return False

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live = [call for calls in self._live.values() for call in calls]
            self._live = {}
            threads = list(self._threads)
        self._stop.set()
        self.session.fail("closed", "the server was closed")
        for call in live:
            call.cut("abort")
        if self._session_id is not None and not self._modern:
            try:  # tell the server the session is over (405: it keeps sessions itself)
                self._http.delete(self._url, headers=self._request_headers(),
                                  timeout=(_DELETE_S, _DELETE_S))
            except self._stack.transport_errors():
                pass
        end = time.monotonic() + _CLOSE_S  # cut calls end at once, cancellations soon
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, end - time.monotonic()))
        _close_pools(self._http)  # after the threads: a connection one returned too


def _close_pools(http: Any) -> None:
    """Close a ``requests`` session and the sockets of its pools now. urllib3 2's
    ``PoolManager.clear()`` only forgets its pools (no dispose function): their idle
    connections kept their sockets open until a garbage collection."""
    for adapter in http.adapters.values():
        manager = getattr(adapter, "poolmanager", None)
        pools = getattr(manager, "pools", None)
        if pools is not None:
            for key in list(pools.keys()):
                pool = pools.get(key)
                if pool is not None:
                    pool.close()
    http.close()


def _media_type(response: requests.Response) -> str:
    """The response's Content-Type without its parameters, lowercase ("" if none)."""
    return response.headers.get("content-type", "").split(";")[0].strip().lower()


def _retry_s(events: MCPEvents) -> float:
    """How long to wait before reconnecting: the server's ``retry``, else our default."""
    if events.retry_ms is None:
        return _RELISTEN_S
    return min(events.retry_ms, _MAX_RETRY_MS) / 1000.0


