"""The HTTP side of ``MockMessagesServer``: the threading server on 127.0.0.1 and the
request handler, which routes each POST (Messages, count_tokens, Chat Completions, and the
Responses, Azure, Bedrock and Vertex routes of ``_mock_responses`` and ``_mock_bedrock``)
and writes the replies: JSON, chunked SSE and the stream faults. The route modules write
through this handler's ``_json``, ``_error`` and stream methods.
"""

from __future__ import annotations

import json
import socketserver
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from ..models.wire import message_events
from ._mock_bedrock import answer_cloud, is_cloud_path
from ._mock_chat import CHAT_PATHS, answer_chat, messages_view, refuse_chat
from ._mock_checks import COUNT_TOKENS_PATH, chat_request_problem, count_tokens, request_problem
from ._mock_gemini import serve as serve_gemini
from ._mock_responses import serve as serve_responses
from ._mock_script import _ERROR_TYPES, DEFAULT_TEXT, Fault

if TYPE_CHECKING:  # pragma: no cover
    from .mock_server import MockMessagesServer

__all__ = ["_Server", "_Handler"]


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
        if serve_gemini(self, raw):  # the Gemini API and Vertex Gemini routes
            return
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

    # -- writing (the route modules write through these too) -------------------------
    def _head(self, status: int, *headers: Mapping[str, str]) -> None:
        """The status line and ``headers`` (mappings sent in order: a name may repeat)."""
        self.send_response_only(status)
        for mapping in headers:
            for name, value in mapping.items():
                self.send_header(name, value)
        self.end_headers()

    def _request_id(self) -> str:
        return f"req_mock_{next(self.server.mock._ids):06d}"

    def _write_json(self, status: int, data: bytes, *headers: Mapping[str, str]) -> None:
        """A JSON body (already encoded) with ``headers`` (the route's request id first)."""
        self._head(status, {"content-type": "application/json",
                            "content-length": str(len(data))}, *headers)
        self.wfile.write(data)

    def _json(self, status: int, payload: Any, headers: Mapping[str, str] = {}) -> None:
        request_id = payload.get("request_id") if isinstance(payload, dict) else None
        self._write_json(status, json.dumps(payload).encode("utf-8"),
                         {"request-id": request_id or self._request_id()}, headers)

    def _error(self, fault: Fault) -> None:
        kind = fault.error_type or _ERROR_TYPES.get(fault.status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": fault.message},
                "request_id": self._request_id()}
        self._json(fault.status, body, fault.headers)

    def _start_chunked(self, content_type: str, *headers: Mapping[str, str]) -> None:
        self._head(200, {"content-type": content_type, "transfer-encoding": "chunked"},
                   *headers)

    def _start_stream(self, id_header: str = "request-id") -> None:
        """A 200 SSE stream, its request id in ``id_header`` (OpenAI's: ``x-request-id``)."""
        self._start_chunked("text/event-stream; charset=utf-8",
                            {"cache-control": "no-cache", id_header: self._request_id()})

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _stream(self, data: bytes, chunk_size: Optional[int] = None,
                id_header: str = "request-id") -> None:
        self._start_stream(id_header)
        if chunk_size:
            for i in range(0, len(data), chunk_size):
                self._chunk(data[i : i + chunk_size])
        elif data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))  # one send with the headers
        self._end_stream()
