"""A streamed reply ends at ``message_stop``, whatever the server does afterwards.

A raw-socket HTTP server on 127.0.0.1 sends a complete stream and then either ends the
body properly (the connection must go back to the pool) or keeps the connection open
sending pings (the reply must come back at once, the timeout must not discard it).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Dict, List, Optional

import pytest

from lattice.errors import RequestTimeoutError
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.models.wire import message_events

KEY = "sk-ant-test-0123456789abcdef"
MESSAGE = {
    "id": "msg_stop", "type": "message", "role": "assistant", "model": "m",
    "content": [{"type": "text", "text": "complete"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1},
}


def _sse(events: List[Dict[str, Any]]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode())
                    for e in events)


class StreamServer:
    """Serves every request on a connection with MESSAGE's stream, then ``after``:

    * ``"end"``: the closing chunk (a well-behaved server);
    * ``"pings"``: a ping every 20 ms, never ending the body, until the test is over;
    * ``"pings-close-delimited"``: no chunked encoding, pings forever (HTTP/1.0 style).
    """

    def __init__(self, after: str, stall_s: float = 0.0) -> None:
        self.after = after
        self.stall_s = stall_s  # from the second request on, wait before reading a body
        self.connections = 0
        self.requests = 0
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.threads: List[threading.Thread] = []
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept.start()

    def _accept_loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _read_request(self, conn: socket.socket, buf: bytes) -> Optional[bytes]:
        while b"\r\n\r\n" not in buf:
            data = conn.recv(65536)
            if not data:
                return None
            buf += data
        head, rest = buf.split(b"\r\n\r\n", 1)
        if self.requests and self.stall_s:
            time.sleep(self.stall_s)  # a slow reader: the client's send must wait
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += conn.recv(65536)
        return rest[length:]

    def _serve(self, conn: socket.socket) -> None:
        body = _sse(message_events(MESSAGE))
        ping = _sse([{"type": "ping"}])
        buf: Optional[bytes] = b""
        with conn:
            try:
                while not self.stop.is_set():
                    buf = self._read_request(conn, buf or b"")
                    if buf is None:
                        return
                    self.requests += 1
                    if self.after == "pings-close-delimited":
                        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                     b"connection: close\r\n\r\n" + body)
                        while not self.stop.wait(0.02):
                            conn.sendall(ping)
                        return
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"transfer-encoding: chunked\r\n\r\n"
                                 b"%x\r\n%s\r\n" % (len(body), body))
                    if self.after == "end":
                        conn.sendall(b"0\r\n\r\n")
                        continue
                    while not self.stop.wait(0.02):
                        conn.sendall(b"%x\r\n%s\r\n" % (len(ping), ping))
                    return
            except OSError:  # the client closed the connection: what we want it to do
                return

    def close(self) -> None:
        self.stop.set()
        self._accept.join(5)
        self.sock.close()
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def serve():
    servers: List[StreamServer] = []

    def make(after: str, stall_s: float = 0.0) -> StreamServer:
        servers.append(StreamServer(after, stall_s))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def _request(timeout_ms: Optional[int] = None) -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                        timeout_ms=timeout_ms)


def _create_in_thread(client: AnthropicClient, request: ModelRequest) -> Dict[str, Any]:
    """``client.create`` bounded by a join timeout, so a regression fails, not hangs."""
    out: Dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            out["reply"] = client.create(request)
        except BaseException as exc:  # reported below
            out["error"] = exc
        out["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "create() did not return after message_stop"
    if "error" in out:
        raise out["error"]
    return out


@pytest.mark.parametrize("after", ["pings", "pings-close-delimited"])
def test_reply_returned_at_message_stop_while_server_keeps_sending_pings(serve, after) -> None:
    server = serve(after)
    with AnthropicClient(KEY, server.url, max_retries=0) as client:
        out = _create_in_thread(client, _request())
    assert out["reply"]["content"] == [{"type": "text", "text": "complete"}]
    assert out["elapsed"] < 2.0


def test_complete_reply_is_not_discarded_by_the_request_timeout(serve) -> None:
    server = serve("pings")
    with AnthropicClient(KEY, server.url, max_retries=0) as client:
        try:
            out = _create_in_thread(client, _request(timeout_ms=3000))
        except RequestTimeoutError:  # pragma: no cover - the regression
            pytest.fail("a complete reply was discarded as a timeout")
    assert out["reply"]["stop_reason"] == "end_turn"
    assert out["elapsed"] < 2.0  # well before the deadline, not at it


def test_a_pinging_connection_is_not_reused_and_the_next_call_works(serve) -> None:
    server = serve("pings")
    with AnthropicClient(KEY, server.url, max_retries=0) as client:
        for _ in range(3):
            assert _create_in_thread(client, _request())["reply"]["stop_reason"] == "end_turn"
    assert server.requests == 3 and server.connections == 3


def test_a_properly_ended_stream_keeps_its_connection_pooled(serve) -> None:
    server = serve("end")
    with AnthropicClient(KEY, server.url, max_retries=0) as client:
        for _ in range(5):
            assert _create_in_thread(client, _request())["reply"]["stop_reason"] == "end_turn"
    assert server.requests == 5
    assert server.connections == 1  # one connection, reused: the end of the body was read


def test_a_reused_connection_gets_its_normal_timeout_back(serve) -> None:
    """The short wait for the end of the body must not stay on the pooled socket: the
    next request's body (16 MB, more than the socket buffers) waits for a slow reader.
    (urllib3 2 sets the timeout again before sending; older versions may not.)"""
    server = serve("end", stall_s=0.5)
    big = ModelRequest(model="m", messages=[{"role": "user", "content": "x" * (16 << 20)}])
    with AnthropicClient(KEY, server.url, max_retries=0) as client:
        assert _create_in_thread(client, _request())["reply"]["stop_reason"] == "end_turn"
        assert _create_in_thread(client, big)["reply"]["stop_reason"] == "end_turn"
    assert server.connections == 1 and server.requests == 2
