"""``MockMessagesServer``: a real Messages API server on 127.0.0.1 for offline tests.

It answers ``POST /v1/messages`` with JSON, or with SSE when the request body says
``"stream": true`` (``stream=True|False`` forces one). ``POST /v1/chat/completions`` (and
``/chat/completions``) get the same script in Chat Completions form (``_mock_chat.py``),
``POST /v1/responses`` and the Azure OpenAI routes in their forms (``_mock_responses.py``),
the Bedrock (SigV4-checked, event-stream replies) and Vertex routes in theirs
(``_mock_bedrock.py``).
Replies come from a script, one per request, in order; each may be

* a string: a text reply;
* an assistant dict like clients return (``{"content": [...], "stop_reason": ...,
  "usage": {...}}``; ``content`` may be a string; missing tool_use ids are made up);
* a callable ``(request_body) -> reply`` (a chat request's body in Messages shape);
* a fault made by ``MockMessagesServer.error(...)``, ``.delay(...)``, ``.hang(...)``,
  ``.cut_stream(...)``, ``.stream_error(...)``, ``.raw_sse(...)`` or ``.trickle(...)``,
  or a dict naming one: ``{"fault": "error", "status": 529}``.

When the script runs out every further request gets the text reply ``"(mock) ok"``
(``DEFAULT_TEXT``), so a loop that asks once more than planned still finishes; with
``repeat=True`` it starts over instead (each reply used goes back to its end), so
``MockMessagesServer([model_fn], repeat=True)`` answers every request with ``model_fn``.
Usage is made up but realistic: ``input_tokens`` is the request body's length // 4.
A request with ``cache_control`` marks is billed against a simulated prompt cache (cache
reads and writes, as ``lattice.testing._mock_cache`` says); more than 4 marks get a 400.
Stream faults (``hang(after_events=...)``, ``cut_stream``, ``stream_error``, ``trickle``)
answer with SSE even when the request did not ask for a stream.

Streams emit what the real API does: ``message_start``, ``content_block_start``, a
``ping``, deltas (text cut into several ``text_delta``; tool input as
``input_json_delta`` chunks; thinking then its signature), ``content_block_stop``,
``message_delta`` and ``message_stop``. It keeps connections alive (HTTP/1.1), sends
``Content-Length`` for JSON and chunked SSE, and writes each response in one send.

Like the real API it answers 400 ``invalid_request_error`` to a request the API refuses
(``_mock_checks.request_problem``, ``chat_request_problem`` on the Chat Completions
route; not recorded, no scripted reply used up), unless made
with ``strict=False``; and it serves ``POST /v1/messages/count_tokens``.
"""

from __future__ import annotations

import itertools
import json
import socket
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from ..models.wire import message_events
from . import _mock_script as faults
from ._mock_bedrock import DEFAULT_BEDROCK_CREDENTIALS, answer_cloud, is_cloud_path
from ._mock_cache import PromptCache, breakpoint_problem
from ._mock_chat import CHAT_PATHS, answer_chat, messages_view, refuse_chat
from ._mock_checks import COUNT_TOKENS_PATH, chat_request_problem, count_tokens, request_problem
from ._mock_responses import serve as serve_responses
from ._mock_script import _ERROR_TYPES, _FAULT_MAKERS, DEFAULT_TEXT, Fault, _check_reply

__all__ = ["MockMessagesServer", "Fault", "message_events"]

def _resolve(reply: Any) -> Any:
    """``reply`` with a fault-naming dict turned into its ``Fault``; a clear ValueError
    for anything the server could not answer with."""
    if isinstance(reply, dict) and "fault" in reply:
        spec = dict(reply)
        name = spec.pop("fault")
        if name not in _FAULT_MAKERS:
            raise ValueError(f"MockMessagesServer: unknown fault {name!r} in {reply!r}; "
                             f"one of {list(_FAULT_MAKERS)}")
        try:
            return getattr(faults, name)(**spec)
        except TypeError as exc:
            raise ValueError(f"MockMessagesServer: bad fault {reply!r}: {exc}") from None
    _check_reply(reply)
    return reply


class MockMessagesServer:
    """A local Messages API server; use as a context manager or ``start()``/``close()``.

    Attributes:
        base_url: ``http://127.0.0.1:<port>``, for ``AnthropicClient(base_url=...)``.
        requests: parsed JSON body of every request (Messages and chat), in order.
        request_headers: the matching headers (lower-case names).
        bedrock_credentials: ``(access_key_id, secret_access_key)`` the Bedrock routes
            check signatures against (default ``("mock-access-key-id",
            "mock-secret-access-key")``).
        vertex_token: the bearer token the Vertex routes want (None: any).
    """

    __test__ = False  # not a pytest test class
    DEFAULT_TEXT = DEFAULT_TEXT

    def __init__(
        self,
        replies: Optional[List[Any]] = None,
        *,
        stream: Optional[bool] = None,
        model: str = "claude-mock-1",
        record: bool = True,
        strict: bool = True,
        repeat: bool = False,
        bedrock_credentials: Tuple[str, str] = DEFAULT_BEDROCK_CREDENTIALS,
        vertex_token: Optional[str] = None,
    ) -> None:
        if not isinstance(repeat, bool):
            raise ValueError(f"MockMessagesServer: repeat must be a bool, got {repeat!r}")
        self.repeat = repeat
        # Bedrock routes check SigV4 against these; Vertex routes want this bearer token
        # (None: any). See _mock_bedrock.py.
        self.bedrock_credentials = tuple(bedrock_credentials)
        self.vertex_token = vertex_token
        self.stream = stream
        self.strict = strict
        self.model = model
        self.record = record
        self.requests: List[Dict[str, Any]] = []
        self.request_headers: List[Dict[str, str]] = []
        self._replies = list(replies or [])
        for reply in self._replies:
            _resolve(reply)  # a bad script fails here, naming the reply
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closing = threading.Event()
        self._sockets: Set[socket.socket] = set()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._cache = PromptCache()  # cache_control marks are billed as the API would

    # -- faults (see _mock_script.py) ------------------------------------------------
    error = staticmethod(faults.error)
    delay = staticmethod(faults.delay)
    hang = staticmethod(faults.hang)
    cut_stream = staticmethod(faults.cut_stream)
    stream_error = staticmethod(faults.stream_error)
    raw_sse = staticmethod(faults.raw_sse)
    trickle = staticmethod(faults.trickle)

    # -- script and lifecycle -------------------------------------------------------
    def add(self, *replies: Any) -> None:
        """Append replies to the script."""
        for reply in replies:
            _resolve(reply)
        with self._lock:
            self._replies.extend(replies)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("MockMessagesServer is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> MockMessagesServer:
        if self._server is None:
            self._server = _Server(self)
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                name="lattice-mock-server", daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; hanging replies end and open connections are shut."""
        self._closing.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> MockMessagesServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not started"
        return f"<MockMessagesServer {where}, {len(self.requests)} requests>"

    # -- serving (called from handler threads) ----------------------------------------
    def _take(self, body: Dict[str, Any], headers: Dict[str, str],
              script_body: Optional[Dict[str, Any]] = None) -> Any:
        with self._lock:
            if self.record:
                self.requests.append(body)
                self.request_headers.append(headers)
            problem = breakpoint_problem(body)  # refused like the API: no reply used
            if problem is not None:
                return Fault("error", status=400, message=problem)
            if self._replies:
                reply = self._replies.pop(0)
                if self.repeat:  # the script starts over when it runs out
                    self._replies.append(reply)
            else:
                reply = DEFAULT_TEXT
        while callable(reply):  # a chat request's script sees it in Messages shape
            reply = reply(body if script_body is None else script_body)
        try:
            return _resolve(reply)
        except ValueError as exc:  # from a callable: answer so that the client says why
            return Fault("error", status=500, message=str(exc),
                         headers={"x-should-retry": "false"})

    def _message(self, reply: Any, body: Dict[str, Any], size: int) -> Dict[str, Any]:
        spec: Dict[str, Any] = {"content": reply} if isinstance(reply, str) else dict(reply)
        content = spec.get("content") or []
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = []
        for block in content:
            block = dict(block)
            if block.get("type") == "tool_use" and not block.get("id"):
                block["id"] = f"toolu_mock_{next(self._ids):06d}"
            blocks.append(block)
        stop = spec.get("stop_reason") or (
            "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
        )
        usage = {
            **self._cache.usage(body, max(1, size // 4)),
            "output_tokens": max(1, len(json.dumps(blocks)) // 4),
        }
        usage.update(spec.get("usage") or {})
        return {
            "id": spec.get("id") or spec.get("provider_response_id")
            or f"msg_mock_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": spec.get("model") or body.get("model") or self.model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": spec.get("stop_sequence"),
            "usage": usage,
        }


def _sse(events: List[Dict[str, Any]]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode()) for e in events
    )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, mock: MockMessagesServer) -> None:
        self.mock = mock
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks up our FQDN, which can stall on a machine without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (timeout, abort) is routine here, not worth a traceback.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    wbufsize = 1 << 16  # buffered: a response leaves in one send when the request ends
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.mock._lock:
            self.server.mock._sockets.add(self.connection)

    def finish(self) -> None:
        with self.server.mock._lock:
            self.server.mock._sockets.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def do_POST(self) -> None:
        mock = self.server.mock
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        path = self.path.split("?")[0].rstrip("/")
        chat = path in CHAT_PATHS  # Chat Completions
        if is_cloud_path(path):  # Bedrock and Vertex routes
            answer_cloud(self, raw, path)
            return
        if not chat and serve_responses(self, raw):  # Responses API and Azure routes
            return
        if path not in ("/v1/messages", COUNT_TOKENS_PATH) and not chat:
            self._error(Fault("error", status=404, message=f"no route {self.path}"))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(Fault("error", status=400, message="request body is not JSON"))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        counting = path == COUNT_TOKENS_PATH
        problem = (request_problem(body, headers, count_tokens=counting)
                   if mock.strict and not chat else None)
        if problem is not None:  # refused as the real API would: not recorded, no reply used
            self._error(Fault("error", status=400, message=problem))
            return
        chat_problem = chat_request_problem(body) if mock.strict and chat else None
        if chat_problem is not None:
            refuse_chat(self, chat_problem)
            return
        if counting:
            self._json(200, {"input_tokens": count_tokens(body)})
            return
        reply = mock._take(body, headers, messages_view(body) if chat else None)
        stream = body.get("stream") is True if mock.stream is None else mock.stream
        if chat:
            answer_chat(self, reply, body, len(raw), stream)
            return
        self._answer(reply, body, len(raw), stream)

    def _answer(self, reply: Any, body: Dict[str, Any], size: int, stream: bool) -> None:
        mock = self.server.mock
        if not isinstance(reply, Fault):
            message = mock._message(reply, body, size)
            if stream:
                self._stream(_sse(message_events(message)))
            else:
                self._json(200, message)
        elif reply.kind == "error":
            self._error(reply)
        elif reply.kind == "delay":
            mock._closing.wait(reply.seconds)
            self._answer(reply.reply, body, size, stream)
        elif reply.kind == "raw_sse" and not reply.chunked:
            self.send_response_only(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            data, step = reply.text.encode("utf-8"), reply.chunk_size or 1 << 30
            for i in range(0, len(data), step):
                self.wfile.write(data[i : i + step])
                self.wfile.flush()
        elif reply.kind == "raw_sse":
            self._stream(reply.text.encode("utf-8"), reply.chunk_size)
        elif reply.kind == "trickle":
            self._start_stream()
            events = message_events(mock._message(DEFAULT_TEXT, body, size))
            self._chunk(_sse(events[:1]))
            while not mock._closing.wait(reply.seconds):
                self._chunk(_sse([{"type": "ping"}]))
        else:  # hang, cut, stream_error: part of a reply first
            events = message_events(mock._message(reply.reply, body, size))
            count = reply.after_events or 0
            if reply.kind == "hang" and reply.after_events is None:
                mock._closing.wait()
                self.close_connection = True
                return
            self._start_stream()
            self._chunk(_sse(events[:count]))
            if reply.kind == "stream_error":
                error = {"type": reply.error_type, "message": reply.message}
                self._chunk(_sse([{"type": "error", "error": error}]))
                self._end_stream()
                return
            if reply.kind == "hang":
                mock._closing.wait()
            self.close_connection = True  # "cut": drop it without the closing chunk

    # -- writing --------------------------------------------------------------------
    def _json(self, status: int, payload: Any, headers: Mapping[str, str] = {}) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response_only(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        request_id = payload.get("request_id") if isinstance(payload, dict) else None
        self.send_header("request-id", request_id or f"req_mock_{next(self.server.mock._ids):06d}")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, fault: Fault) -> None:
        kind = fault.error_type or _ERROR_TYPES.get(fault.status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": fault.message},
                "request_id": f"req_mock_{next(self.server.mock._ids):06d}"}
        self._json(fault.status, body, fault.headers)

    def _start_stream(self) -> None:
        self.send_response_only(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", f"req_mock_{next(self.server.mock._ids):06d}")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _stream(self, data: bytes, chunk_size: Optional[int] = None) -> None:
        self._start_stream()
        if chunk_size:
            for i in range(0, len(data), chunk_size):
                self._chunk(data[i : i + chunk_size])
        elif data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))  # one send with the headers
        self._end_stream()

