"""``MCPServerHTTP``: an MCP server over the Streamable HTTP transport (``requests``).

Every message is a POST. A request's POST runs in its own daemon thread, which hands what
comes back (one JSON body, or an SSE stream of messages ending with the reply) to the
JSON-RPC session, so the caller waits on the session like over stdio, with its timeout and
signal. Notifications and our replies to the server are posted at once, in order (the
server must see ``notifications/initialized`` before the next request); a cancellation is
posted in the background, and the stream it cancels is closed. After the handshake a
GET stream (if the server offers one) carries the server's own requests and notifications.

``requests`` is imported when a server starts. ``_lock`` guards ``_closed`` and ``_live``
(the responses being read: by request id, and the GET stream); ``_session_id`` and
``_version`` are written during the handshake, before any other request is made.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from ..models.sse import SSEDecoder, iter_lines
from ._errors import MCPError
from ._rpc import Message, RPCSession
from ._server import MCPServerBase, Transport

if TYPE_CHECKING:
    import requests

__all__ = ["MCPServerHTTP"]

_ACCEPT = "application/json, text/event-stream"
_CONNECT_S = 10.0
_DELETE_S = 2.0
_RELISTEN_S = 1.0
_GET = object()  # the key of the GET stream in _live


def _abort(response: requests.Response) -> None:
    """End a response another thread is reading. ``response.close()`` would wait for that
    thread's read to return (they share a lock); shutting the socket down makes it return."""
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    if sock is None:
        return  # the read ends at its timeout; the thread is a daemon
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _shown(url: str) -> str:
    """``url`` without credentials or query (which may hold a token), for names and reprs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


def _rpc_error_text(body: bytes) -> str:
    """The JSON-RPC error message in an HTTP error body, else the body's start."""
    try:
        error = json.loads(body).get("error") or {}
        return f"{error.get('message')} (JSON-RPC error {error.get('code')})"
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace").strip()


class _HTTPTransport(Transport):
    def __init__(self, server: str, url: str, headers: Dict[str, str], timeout_ms: int) -> None:
        try:
            import requests
        except ImportError as exc:  # pragma: no cover - requests is a dependency
            raise MCPError(server, "start", "MCPServerHTTP needs the requests package") from exc
        self.session = RPCSession(server, self.send)
        self._requests = requests
        self._http = requests.Session()
        self._url = url
        self._headers = headers
        self._timeout = (_CONNECT_S, timeout_ms / 1000.0 + _CONNECT_S)
        self._session_id: Optional[str] = None
        self._version: Optional[str] = None
        self._lock = threading.Lock()
        self._closed = False
        self._live: Dict[Any, requests.Response] = {}

    def _redact(self, text: str) -> str:
        """``text`` without the URL's query or password (either may hold a token)."""
        parts = urlsplit(self._url)
        for secret in (parts.query, parts.password):
            if secret:
                text = text.replace(secret, "***")
        return text

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

    @staticmethod
    def _background(target: Any, message: Message) -> None:
        threading.Thread(target=target, args=(message,), daemon=True,
                         name="lattice-mcp-http").start()

    def _request(self, message: Message) -> None:
        request_id = message["id"]
        try:
            self._post(message)
        except MCPError as exc:
            self.session.fail_request(request_id, exc)
            return
        # The POST is over: if its reply was not in it, no reply will come.
        self.session.fail_request(request_id, MCPError(
            self.session.server, "protocol",
            f"the response to {message['method']} ended without its JSON-RPC reply"))

    def _cancel(self, message: Message) -> None:
        try:
            self._post(message)
        except MCPError:
            pass  # best effort: the caller has stopped waiting either way
        with self._lock:
            live = self._live.pop((message.get("params") or {}).get("requestId"), None)
        if live is not None:
            _abort(live)  # the thread reading it ends now, not at the read timeout

    def ready(self) -> None:
        threading.Thread(target=self._listen, daemon=True, name="lattice-mcp-http-get").start()

    def _listen(self) -> None:
        """The GET stream: where a server sends requests and notifications of its own."""
        while True:
            headers = self._request_headers()
            headers["Accept"] = "text/event-stream"
            del headers["Content-Type"]
            try:
                response = self._http.get(self._url, headers=headers, stream=True,
                                          timeout=(_CONNECT_S, None))
            except self._requests.RequestException:
                return
            with self._lock:
                if self._closed:
                    response.close()
                    return
                self._live[_GET] = response
            try:
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if response.status_code >= 400 or kind != "text/event-stream":
                    return  # 405: this server offers no such stream
                self._read_events(response.iter_content(chunk_size=None), None)
            except (self._requests.RequestException, OSError, AttributeError, ValueError):
                return
            finally:
                with self._lock:
                    self._live.pop(_GET, None)
                response.close()
            with self._lock:
                if self._closed:
                    return
            time.sleep(_RELISTEN_S)  # the server ended the stream: open it again

    def _post(self, message: Message) -> None:
        what = message.get("method") or "a reply"
        body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        try:
            response = self._http.post(self._url, data=body, headers=self._request_headers(),
                                       stream=True, timeout=self._timeout)
        except self._requests.RequestException as exc:
            raise MCPError(self.session.server, "http",
                           f"{what} could not be sent: {self._redact(str(exc))}") from None
        request_id = message.get("id") if "method" in message else None
        with self._lock:
            if self._closed:
                response.close()
                return
            if request_id is not None:
                self._live[request_id] = response
        try:
            self._handle(what, message, response)
        except (self._requests.RequestException, OSError, AttributeError) as exc:
            # A stream cut short, or closed under us by close() or a cancellation.
            raise MCPError(self.session.server, "http", f"the response to {what} broke off: "
                                                        f"{type(exc).__name__}") from None
        finally:
            with self._lock:
                self._live.pop(request_id, None)
            response.close()

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
            raise MCPError(self.session.server, "http",
                           f"{what}: HTTP {status}: {_rpc_error_text(response.content)}")
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if status == 202 or "id" not in message or "method" not in message:
            return  # a notification or a reply: nothing comes back
        if kind == "text/event-stream":
            self._read_events(response.iter_content(chunk_size=None), message["id"])
        elif kind == "application/json":
            self._deliver(response.content)
        else:
            raise MCPError(self.session.server, "protocol",
                           f"{what}: unexpected content type {kind or '(none)'!r}")

    def _read_events(self, chunks: Iterable[bytes], request_id: Any) -> None:
        for event in SSEDecoder().events(iter_lines(chunks)):
            if event.event not in (None, "message"):
                continue
            if self._deliver(event.data) == request_id is not None:
                return  # our reply: the stream has nothing more for us

    def _deliver(self, data: bytes) -> Any:
        """Hand a JSON body to the session; the id it answers, if it is a reply."""
        try:
            message = json.loads(data)
        except ValueError:
            self.session.noise(data[:200].decode("utf-8", "replace"))
            return None
        self.session.receive(message)
        if isinstance(message, dict) and ("result" in message or "error" in message):
            return message.get("id")
        return None

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            live, self._live = list(self._live.values()), {}
        self.session.fail("closed", "the server was closed")
        for response in live:
            _abort(response)
        if self._session_id is not None:
            try:  # tell the server the session is over (405: it keeps sessions itself)
                self._http.delete(self._url, headers=self._request_headers(),
                                  timeout=(_DELETE_S, _DELETE_S))
            except self._requests.RequestException:
                pass
        self._http.close()


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
        url: The server's MCP endpoint, e.g. ``"http://127.0.0.1:8000/mcp"``.
        headers: Sent with every request (e.g. ``Authorization``); never shown in a repr,
            log or error.
        name: Used in error messages and logs; default: the name the server gives.
        timeout_ms: Bound on ``start()`` (the handshake) and on each request.
        tool_prefix: Put before each tool's name.
        allowed_tools: Only these tools (the server's own names); None: all.
    """

    def __init__(self, url: str, *, headers: Optional[Mapping[str, str]] = None,
                 name: Optional[str] = None, timeout_ms: int = 60000, tool_prefix: str = "",
                 allowed_tools: Optional[Iterable[str]] = None) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") \
                or not urlsplit(url).hostname:
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        self.url = url
        self._headers = _headers(headers)
        super().__init__(name=name, timeout_ms=timeout_ms, tool_prefix=tool_prefix,
                         allowed_tools=allowed_tools)

    @property
    def headers(self) -> Tuple[str, ...]:
        """The names of the extra headers sent (their values stay private)."""
        return tuple(self._headers)

    def _default_name(self) -> str:
        return _shown(self.url)

    def _open(self, timeout_ms: int) -> _HTTPTransport:
        return _HTTPTransport(self.name, self.url, self._headers, timeout_ms)

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<MCPServerHTTP {self.name!r} url={_shown(self.url)!r} {state}>"
