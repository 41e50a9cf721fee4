"""MCPServerHTTP against a small Streamable HTTP server written here (http.server on
127.0.0.1) that can misbehave: error statuses, a dropped session, cut streams, silence."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional

import pytest

from lattice import AbortController, ToolContext
from lattice.mcp import MCPError, MCPServerHTTP

TOOL = {"name": "work", "description": "Works.", "inputSchema": {"type": "object"}}


class FakeMCP(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: List[Dict[str, Any]] = []
        self.call: str = "json"  # how tools/call is answered: json, sse, 500, 400, 404,
        #                           html, cut, silent
        self.release = threading.Event()
        self.session_id = "session-1"
        self.pending_reply: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


class Handler(BaseHTTPRequestHandler):
    server: FakeMCP

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, status: int, body: bytes = b"", kind: str = "application/json",
             headers: Optional[Dict[str, str]] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def reply(self, message: Dict[str, Any], result: Dict[str, Any], **extra: Any) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send(200, body, **extra)

    def do_GET(self) -> None:
        self.server.seen.append({"verb": "GET", "headers": dict(self.headers),
                                 "at": time.monotonic()})
        if self.headers.get("Last-Event-ID") == "ev-1" and self.server.pending_reply:
            reply = {"jsonrpc": "2.0", "id": self.server.pending_reply,
                     "result": {"content": [{"type": "text", "text": "resumed"}]}}
            body = f"id: ev-2\ndata: {json.dumps(reply)}\n\n".encode()
            self.send(200, body, kind="text/event-stream")
            return
        self.send(405)

    def do_DELETE(self) -> None:
        self.server.seen.append({"verb": "DELETE", "headers": dict(self.headers)})
        self.send(200)

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append({"verb": "POST", "headers": dict(self.headers), "body": message})
        method = message.get("method")
        if method == "initialize":
            self.reply(message, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                 "serverInfo": {"name": "fake", "version": "1"}},
                       headers={"Mcp-Session-Id": self.server.session_id})
        elif method == "server/discover":  # a legacy server: no such method
            self.send(400, json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": "Method not found"}}).encode())
        elif "id" not in message:
            self.send(202)
        elif method == "tools/list":
            self.reply(message, {"tools": [TOOL]})
        else:
            self.call_tool(message)

    def call_tool(self, message: Dict[str, Any]) -> None:
        how = self.server.call
        if how == "json":
            self.reply(message, {"content": [{"type": "text", "text": "ok"}]})
        elif how == "sse":
            events = [{"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": 1, "progress": 1}},
                      {"jsonrpc": "2.0", "id": message["id"],
                       "result": {"content": [{"type": "text", "text": "streamed"}]}}]
            body = "".join(f"event: message\ndata: {json.dumps(e)}\n\n" for e in events)
            self.send(200, body.encode(), kind="text/event-stream")
        elif how == "cut":
            self.send(200, b": keep-alive\n\n", kind="text/event-stream")
        elif how == "resume":  # a priming event, a retry delay, then the stream breaks
            self.server.pending_reply = message["id"]
            self.send(200, b"id: ev-1\nretry: 400\ndata:\n\n", kind="text/event-stream")
        elif how == "404-once":  # the server restarted: our session is gone, once
            self.server.call = "json"
            self.server.session_id = "session-2"
            self.send(404, b"no such session")
        elif how in ("500", "404"):
            self.send(int(how), b"Internal trouble" if how == "500" else b"no such session")
        elif how == "400":
            error = {"jsonrpc": "2.0", "id": message["id"],
                     "error": {"code": -32600, "message": "Bad session header"}}
            self.send(400, json.dumps(error).encode())
        elif how == "html":
            self.send(200, b"<html>hello</html>", kind="text/html")
        elif how == "silent":
            self.server.release.wait(30)
            self.send(500)


@pytest.fixture
def fake():
    server = FakeMCP()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def call(server: MCPServerHTTP, signal=None):
    [work] = server.tools()
    return work({}, ToolContext(signal or AbortController().signal, "toolu_1"))


def test_headers_session_id_and_delete(fake):
    server = MCPServerHTTP(fake.url, headers={"Authorization": "Bearer sk-secret-123"})
    with server:
        assert call(server).content == [{"type": "text", "text": "ok"}]
        # the optional GET stream is opened by a thread of its own: give it time on a
        # loaded machine before the session ends
        deadline = time.monotonic() + 20
        while not any(s["verb"] == "GET" for s in fake.seen) and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the fake server's log, with a deadline
    posts = [s for s in fake.seen if s["verb"] == "POST"]
    # the probe for the 2026-07-28 wire: a legacy server refuses it, the handshake follows
    assert posts[0]["body"]["method"] == "server/discover"
    assert posts[0]["headers"]["MCP-Protocol-Version"] == "2026-07-28"
    assert posts[0]["headers"]["Mcp-Method"] == "server/discover"
    posts = posts[1:]
    for post in posts:
        assert post["headers"]["Accept"] == "application/json, text/event-stream"
        assert post["headers"]["Authorization"] == "Bearer sk-secret-123"
        assert post["headers"]["Content-Type"] == "application/json"
    assert "Mcp-Session-Id" not in posts[0]["headers"]  # initialize
    for post in posts[1:]:
        assert post["headers"]["Mcp-Session-Id"] == "session-1"
        assert post["headers"]["MCP-Protocol-Version"] == "2025-06-18"
    assert [p["body"].get("method") for p in posts] == [
        "initialize", "notifications/initialized", "tools/list", "tools/call"]
    [delete] = [s for s in fake.seen if s["verb"] == "DELETE"]
    assert delete["headers"]["Mcp-Session-Id"] == "session-1"
    assert any(s["verb"] == "GET" for s in fake.seen)  # the optional stream; 405 is fine


def test_header_values_never_show(fake):
    server = MCPServerHTTP(fake.url + "?token=sk-query-secret",
                           headers={"X-Api-Key": "sk-secret-456"})
    for text in (repr(server), str(server.headers)):
        assert "sk-secret-456" not in text and "sk-query-secret" not in text
    with server:
        assert "sk-secret-456" not in repr(server) and "running" in repr(server)
    with pytest.raises(ValueError) as info:
        MCPServerHTTP(fake.url, headers={"X-Api-Key": 12345})
    assert "headers" in str(info.value) and "12345" not in str(info.value)


def test_sse_replies_with_notifications_before_them(fake):
    fake.call = "sse"
    with MCPServerHTTP(fake.url) as server:
        assert call(server).content == [{"type": "text", "text": "streamed"}]


@pytest.mark.parametrize("how, words", [
    ("500", "HTTP 500: Internal trouble"),
    ("400", "tools/call failed: Bad session header (JSON-RPC error -32600)"),
    ("html", "unexpected content type 'text/html'"),
    ("cut", "ended without its JSON-RPC reply"),
])
def test_error_answers_are_error_results(fake, how, words):
    fake.call = how
    with MCPServerHTTP(fake.url) as server:
        result = call(server)
        assert result.is_error and "MCP server 'fake'" in result.content
        assert words in result.content
        assert server.running  # one failed request does not end the session


def test_a_dropped_session_ends_it(fake):
    fake.call = "404"
    with MCPServerHTTP(fake.url) as server:
        [work] = server.tools()
        result = work({}, ToolContext(AbortController().signal, "toolu_1"))
        assert result.is_error and "ended the HTTP session" in result.content
        assert not server.running
        fake.call = "json"  # not restarted silently: it stays over until start() again
        again = work({}, ToolContext(AbortController().signal, "toolu_2"))
        assert again.is_error and "ended the HTTP session" in again.content
    with server:
        assert work({}, ToolContext(AbortController().signal, "toolu_3")).content[0]["text"] == "ok"


def test_a_forgotten_session_is_started_again_once(fake):
    fake.call = "404-once"
    with MCPServerHTTP(fake.url) as server:
        assert call(server).content == [{"type": "text", "text": "ok"}]
        assert server.running
    posts = [s["body"].get("method") for s in fake.seen if s["verb"] == "POST"]
    assert posts.count("initialize") == 2 and posts.count("tools/call") == 2
    last = [s for s in fake.seen if s["verb"] == "POST"][-1]
    assert last["headers"]["Mcp-Session-Id"] == "session-2"


def test_a_priming_event_is_silent_and_a_broken_stream_resumes(fake, caplog):
    """Issue 35: priming events (no data) were logged as "not JSON-RPC" warnings, and a
    broken stream was reopened after a fixed second without Last-Event-ID."""
    fake.call = "resume"
    with caplog.at_level(logging.DEBUG, logger="lattice.mcp"):
        with MCPServerHTTP(fake.url) as server:
            began = time.monotonic()
            assert call(server).content == [{"type": "text", "text": "resumed"}]
    assert "not JSON-RPC" not in caplog.text
    [resumed] = [s for s in fake.seen if s["headers"].get("Last-Event-ID") == "ev-1"]
    assert resumed["at"] - began >= 0.35  # the server's retry (400 ms), not our default


def test_a_silent_server_times_out_and_a_signal_cancels(fake):
    fake.call = "silent"
    with MCPServerHTTP(fake.url, timeout_ms=300) as server:
        began = time.monotonic()
        result = call(server)
        assert result.is_error and "no reply to tools/call within 300 ms" in result.content
        assert time.monotonic() - began < 3
    controller = AbortController()
    with MCPServerHTTP(fake.url) as server:
        threading.Timer(0.2, controller.abort).start()
        began = time.monotonic()
        result = call(server, controller.signal)
        assert result.is_error and "cancelled" in result.content
        assert time.monotonic() - began < 1.2
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(cancels(fake)) < 2:
            time.sleep(0.01)
        assert cancels(fake) == ["timed out after 300 ms", "cancelled by the client"]


def cancels(fake: FakeMCP) -> List[str]:
    return [s["body"]["params"]["reason"] for s in list(fake.seen)
            if s.get("body", {}).get("method") == "notifications/cancelled"]


def test_an_unreachable_server():
    server = MCPServerHTTP("http://user:pw-secret@127.0.0.1:9/mcp?key=sk-query-secret",
                           timeout_ms=2000)  # the discard port: nothing listens
    with pytest.raises(MCPError) as info:
        server.start()
    assert info.value.kind == "http" and "initialize could not be sent" in str(info.value)
    assert "sk-query-secret" not in str(info.value) and "pw-secret" not in str(info.value)
    assert info.value.server == "http://127.0.0.1:9/mcp"


def test_a_server_gone_after_start(fake):
    with MCPServerHTTP(fake.url) as server:
        [work] = server.tools()
        fake.shutdown()
        fake.server_close()
        result = work({}, ToolContext(AbortController().signal, "toolu_1"))
        assert result.is_error and "could not be sent" in result.content


@pytest.mark.parametrize("url", ["ftp://x/mcp", "127.0.0.1:80/mcp", "http:///mcp", 5])
def test_bad_urls(url):
    with pytest.raises(ValueError) as info:
        MCPServerHTTP(url)
    assert "url" in str(info.value)


def test_importing_lattice_mcp_imports_no_requests():
    code = ("import sys; import lattice.mcp; "
            "from lattice.mcp import MCPServerHTTP; MCPServerHTTP('http://127.0.0.1:1/mcp'); "
            "print('requests' in sys.modules, 'lattice.mcp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "True"]
    code = "import sys, lattice; print('lattice.mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
