"""``MCPServerHTTP``: an MCP server over the Streamable HTTP transport.

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

import json
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from ..cancellation import call_later
from ..errors import APIError
from ..models.body import DEFAULT_MAX_RESPONSE_BYTES, read_body, read_chunks
from ..models.cutoff import HeldCall
from ..models.options import secrets_of
from ..models.sse import SSEDecoder, iter_lines
from ..models.urls import hide_queries_from_urllib3, redact, shown_url, url_secrets
from ._errors import MCPError
from ._rpc import Message, RPCSession, logger
from ._server import MCPServerBase, Transport

if TYPE_CHECKING:
    import requests

__all__ = ["MCPServerHTTP"]

_ACCEPT = "application/json, text/event-stream"
_CONNECT_S = 10.0
_DELETE_S = 2.0
_CANCEL_S = 0.9  # a cancellation's POST: the call it cancels is over, so only this long
_RELISTEN_S = 1.0
_GET = object()  # the key of the GET stream in _live


def _rpc_error_text(body: bytes) -> str:
    """The JSON-RPC error message in an HTTP error body, else the body's start."""
    try:
        error = json.loads(body).get("error") or {}
        return f"{error.get('message')} (JSON-RPC error {error.get('code')})"
    except (ValueError, AttributeError, RecursionError):
        return body[:200].decode("utf-8", "replace").strip()


class _HTTPTransport(Transport):
    def __init__(self, server: str, url: str, headers: Dict[str, str], timeout_ms: int,
                 max_bytes: int) -> None:
        from ..models import http as stack

        secrets = sorted({*secrets_of(headers), *url_secrets(url)}, key=len, reverse=True)
        self.session = RPCSession(server, self.send, abandon=self._abandon, secrets=secrets)
        self._stack = stack
        self._http = stack.new_session(url)
        hide_queries_from_urllib3(url)
        self._url = url
        self._shown = shown_url(url)
        self._secrets = secrets
        self._headers = headers
        self._max = max_bytes
        self._timeout = (_CONNECT_S, timeout_ms / 1000.0 + _CONNECT_S)
        self._session_id: Optional[str] = None
        self._version: Optional[str] = None
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._live: Dict[Any, HeldCall] = {}
        self._threads: List[threading.Thread] = []

    def negotiated(self, version: str) -> None:
        self._version = version

    def _request_headers(self) -> Dict[str, str]:
        headers = dict(self._headers)
        headers["Accept"] = _ACCEPT
        headers["Content-Type"] = "application/json"
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        if self._version is not None:
            headers["MCP-Protocol-Version"] = self._version
        return headers

    def _error(self, kind: str, text: str) -> MCPError:
        return MCPError(self.session.server, kind, redact(text, self._secrets))

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
            call = self._live.get(request_id)
        if call is not None:
            call.cut("abort")

    def ready(self) -> None:
        thread = threading.Thread(target=self._listen, daemon=True,
                                  name="lattice-mcp-http-get")
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _listen(self) -> None:
        """The GET stream: where a server sends requests and notifications of its own."""
        while not self._stop.is_set():
            headers = self._request_headers()
            headers["Accept"] = "text/event-stream"
            del headers["Content-Type"]
            try:
                ended = self._exchange("the GET stream", "GET", _GET, None, headers,
                                       (_CONNECT_S, None), self._read_stream)
            except MCPError as exc:
                logger.debug("MCP server %r: the GET stream ended: %s", self.session.server,
                             exc)
                return
            if not ended:
                return  # 405: this server offers no such stream
            self._stop.wait(_RELISTEN_S)  # the server ended the stream: open it again

    def _read_stream(self, response: requests.Response) -> bool:
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if response.status_code >= 400 or kind != "text/event-stream":
            return False
        self._read_events(response, None)
        return True

    def _post(self, message: Message, limit_s: Optional[float] = None) -> None:
        what = message.get("method") or "a reply"
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        key = message["id"] if "method" in message and "id" in message else None
        self._exchange(what, "POST", key, body, self._request_headers(), self._timeout,
                       lambda response: self._handle(what, message, response), limit_s)

    def _exchange(self, what: str, verb: str, key: Any, body: Optional[bytes],
                  headers: Dict[str, str], timeout: Tuple[float, Optional[float]],
                  handle: Any, limit_s: Optional[float] = None) -> Any:
        """One HTTP exchange; ``handle(response)`` reads it. A request's (``key`` not
        None) is cut at once by ``_abandon`` or ``close``; any is cut after ``limit_s``.
        Failures become ``MCPError``."""
        call = HeldCall(None, self._secrets, None)
        with self._lock:
            if self._closed and limit_s is None:
                return None
            if key is not None:
                self._live[key] = call
        stop_timer = call_later(limit_s, call.expire) if limit_s is not None else None
        call.activate()
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
                raise self._error("closed", f"{what} was abandoned") from None
            failed = "could not be sent" if call.response is None else "broke off"
            failure = self._stack.transport_failure(
                exc, api="MCP", shown_url=self._shown, secrets=self._secrets,
                headers=headers, what=f"{what} {failed}")
            raise self._error("http", str(failure)) from None
        except APIError as exc:  # a body, line or event over max_response_bytes
            raise self._error("protocol", f"{what}: {exc}") from None
        finally:
            if stop_timer is not None:
                stop_timer()
            with self._lock:
                if key is not None and self._live.get(key) is call:
                    del self._live[key]
            call.finish()

    def _handle(self, what: str, message: Message, response: requests.Response) -> None:
        status = response.status_code
        if message.get("method") == "initialize" and status < 400:
            self._session_id = response.headers.get("mcp-session-id")
        if status == 404 and self._session_id is not None:
            # The server forgot our session (expired, restarted): it is over.
            self.session.fail("closed", "the server ended the HTTP session (404 for its "
                                        "Mcp-Session-Id); close() and start() begin a new one")
            failure = self.session.failure
            assert failure is not None
            raise failure
        if status >= 400:
            text = _rpc_error_text(read_body(response, self._max))
            raise self._error("http", f"{what}: HTTP {status}: {text}")
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if status == 202 or "id" not in message or "method" not in message:
            return  # a notification or a reply: nothing comes back
        if kind == "text/event-stream":
            self._read_events(response, message["id"])
        elif kind == "application/json":
            self.session.receive_data(read_body(response, self._max))
        else:
            raise self._error("protocol", f"{what}: unexpected content type "
                                          f"{kind or '(none)'!r}")

    def _read_events(self, response: requests.Response, request_id: Any) -> None:
        chunks = read_chunks(response, None, time.monotonic)
        for event in SSEDecoder().events(iter_lines(chunks, self._max), self._max):
            if event.event not in (None, "message"):
                continue
            if self.session.receive_data(event.data) == request_id is not None:
                return  # our reply: the stream has nothing more for us

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, self._live = list(self._live.values()), {}
            threads = list(self._threads)
        self._stop.set()
        self.session.fail("closed", "the server was closed")
        for call in live:
            call.cut("abort")
        if self._session_id is not None:
            try:  # tell the server the session is over (405: it keeps sessions itself)
                self._http.delete(self._url, headers=self._request_headers(),
                                  timeout=(_DELETE_S, _DELETE_S))
            except self._stack.transport_errors():
                pass
        self._http.close()
        end = time.monotonic() + _RELISTEN_S  # cut calls end at once, cancellations soon
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, end - time.monotonic()))


def _headers(value: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        # The values may be secrets: the message names the option, not what was given.
        raise ValueError("headers must be a dict of str to str")
    return dict(value)


class MCPServerHTTP(MCPServerBase):
    """An MCP server at a URL, over the Streamable HTTP transport.

    Args:
        url: The server's MCP endpoint, e.g. ``"http://127.0.0.1:8000/mcp"``. A password
            or query values in it are never shown.
        headers: Sent with every request (e.g. ``Authorization``); never shown in a repr,
            log, error or tool result.
        name: Used in error messages and logs; default: the name the server gives.
        timeout_ms: Bound on ``start()`` (the handshake) and on each request.
        tool_prefix: Put before each tool's name.
        allowed_tools: Only these tools (the server's own names); None: all.
        max_response_bytes: The most one response body, SSE line or event (one message)
            may hold; beyond it that call fails with ``MCPError`` kind ``"protocol"``.
    """

    def __init__(self, url: str, *, headers: Optional[Mapping[str, str]] = None,
                 name: Optional[str] = None, timeout_ms: int = 60000, tool_prefix: str = "",
                 allowed_tools: Optional[Iterable[str]] = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        from ..models.client import check_max_bytes

        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") \
                or not urlsplit(url).hostname:
            shown = shown_url(url) if isinstance(url, str) else url
            raise ValueError(f"url must be an http:// or https:// URL, got {shown!r}")
        self.url = url
        self._headers = _headers(headers)
        self.max_response_bytes = check_max_bytes(max_response_bytes)
        super().__init__(name=name, timeout_ms=timeout_ms, tool_prefix=tool_prefix,
                         allowed_tools=allowed_tools)

    @property
    def headers(self) -> Tuple[str, ...]:
        """The names of the extra headers sent (their values stay private)."""
        return tuple(self._headers)

    def _default_name(self) -> str:
        parts = urlsplit(self.url)  # no credentials, no query: a name is shown everywhere
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}"

    def _prepare(self) -> None:
        try:
            from ..models.http import transport_errors

            transport_errors()  # imports requests and urllib3
        except ImportError as exc:  # pragma: no cover - requests is a dependency
            raise MCPError(self.name, "start", "MCPServerHTTP needs the requests package"
                           ) from exc

    def _open(self, timeout_ms: int) -> _HTTPTransport:
        return _HTTPTransport(self.name, self.url, self._headers, timeout_ms,
                              self.max_response_bytes)

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<MCPServerHTTP {self.name!r} url={self._default_name()!r} {state}>"
