"""A raw HTTP server on 127.0.0.1 that answers every request with one response that may
never end: an endless SSE line, an endless JSON body, gzip that inflates without end, or
SSE keep-alive comments forever. It notes when the client hung up (a write failed), so a
test can check that a call that gave up closed its connection.

Used by tests/models/test_bounded_input.py and tests/mcp/test_bounded.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from typing import Callable, Iterator, List, Optional

CHUNK = b"x" * 65536


class EndlessServer:
    """``EndlessServer(mode)``; ``mode`` is one of ``sse-line``, ``sse-event`` (endless
    ``data:`` lines, no blank line), ``json``, ``gzip``, ``error-json`` (a 500 that never
    ends), ``keep-alive`` (``: keep-alive`` every 50 ms), ``silent`` (the headers of a
    stream, then nothing), or ``body``: the pieces ``body()`` yields, sent as they come
    with content type ``kind`` (an endless stream of valid events, say). ``answer`` is a
    callable ``(request bytes) -> bytes | None`` (None: the mode's answer for that one)."""

    def __init__(self, mode: str, answer: Optional[Callable[[bytes], Optional[bytes]]] = None,
                 *, body: Optional[Callable[[], Iterator[bytes]]] = None,
                 kind: str = "text/event-stream") -> None:
        self.mode = mode
        self.answer = answer
        self.body = body
        self.kind = kind
        self.hung_up: List[float] = []  # when each client connection was found closed
        self.sent: List[int] = []  # bytes sent on each connection
        self.requests: List[bytes] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()

    def __enter__(self) -> EndlessServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return data
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            piece = conn.recv(65536)
            if not piece:
                break
            body += piece
        return head + b"\r\n\r\n" + body

    def _serve(self, conn: socket.socket) -> None:
        sent = 0
        try:
            while True:  # keep-alive: one request after another on this connection
                request = self._read_request(conn)
                if not request:
                    return
                self.requests.append(request)
                answer = self.answer(request) if self.answer is not None else None
                if answer is not None:
                    conn.sendall(answer)
                    continue
                for piece in self._endless():
                    conn.sendall(piece)
                    sent += len(piece)
                    if self._stop.is_set():
                        return
        except OSError:
            self.hung_up.append(time.monotonic())
        finally:
            self.sent.append(sent)
            conn.close()

    def _endless(self):  # type: ignore[no-untyped-def]
        mode = self.mode
        status = "500 Internal Server Error" if mode == "error-json" else "200 OK"
        kind = "text/event-stream" if mode.startswith(("sse", "keep")) else (
            self.kind if mode in ("body", "silent") else "application/json")
        head = f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
        if mode == "gzip":
            head += "Content-Encoding: gzip\r\n"
        yield (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
        if mode == "sse-line":
            yield _chunk(b'event: message_start\ndata: {"type": "message_start", "x": "')
            while True:
                yield _chunk(CHUNK)
        elif mode == "sse-event":
            while True:
                yield _chunk(b"data: " + CHUNK + b"\n")
        elif mode in ("json", "error-json"):
            yield _chunk(b'{"error": {"message": "')
            while True:
                yield _chunk(CHUNK)
        elif mode == "gzip":
            squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
            yield _chunk(squeeze.compress(b'{"id": "'))
            zeros = b"0" * (1 << 20)
            while True:
                yield _chunk(squeeze.compress(zeros) + squeeze.flush(zlib.Z_SYNC_FLUSH))
        elif mode == "body" and self.body is not None:
            for piece in self.body():
                yield _chunk(piece)
            yield b"0\r\n\r\n"  # a body that ends (most never do)
        elif mode == "silent":
            while not self._stop.wait(0.05):
                pass
        elif mode == "keep-alive":
            while True:
                yield _chunk(b": keep-alive\n\n")
                time.sleep(0.05)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def http_response(body: object, status: str = "200 OK",
                  kind: str = "application/json", headers: str = "") -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n"
            f"{headers}\r\n").encode() + data


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (VmHWM), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0
