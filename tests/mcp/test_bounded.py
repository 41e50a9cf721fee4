"""MCP servers against hostile replies (SPEC 16a): bounded messages, calls that give up
close their connection, deep nesting fails one call only, secrets stay out of results."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import requests  # noqa: F401  (loaded before servers start with short timeouts)
from endless_server import EndlessServer, http_response

from lattice import AbortController
from lattice.mcp import MCPError, MCPServerHTTP, MCPServerStdio

BROKEN = str(Path(__file__).with_name("broken_server.py"))
MiB = 1 << 20
TOKEN = "Bearer tok-0123456789-SECRET"


class Script:
    """Answers the handshake and tools/list; ``tools/call`` number n as ``calls[n]``:
    None for the server's endless mode, else a function of the request message."""

    def __init__(self, *calls: Any, hang_cancels: bool = False) -> None:
        self.calls: List[Any] = list(calls)
        self.count = 0
        self.hang_cancels = hang_cancels  # never answer a cancellation (until released)
        self.release = threading.Event()

    def __call__(self, raw: bytes) -> Optional[bytes]:
        head, _, body = raw.partition(b"\r\n\r\n")
        verb = head.split(b" ", 1)[0]
        if verb == b"GET":
            return http_response(b"", "405 Method Not Allowed")
        if verb == b"DELETE":
            return http_response(b"")
        message = json.loads(body)
        method = message.get("method")
        if method == "initialize":
            return http_response(_result(message, {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}),
                headers="Mcp-Session-Id: s1\r\n")
        if method == "server/discover":  # a legacy server: no such method
            return http_response({"jsonrpc": "2.0", "id": message["id"], "error": {
                "code": -32601, "message": "Method not found"}})
        if "id" not in message:
            if method == "notifications/cancelled" and self.hang_cancels:
                self.release.wait(30)
            return http_response(b"", "202 Accepted")
        if method == "tools/list":
            return http_response(_result(message, {"tools": [{
                "name": "work", "inputSchema": {"type": "object"}}]}))
        self.count += 1
        answer = self.calls[self.count - 1] if self.count <= len(self.calls) else _ok
        return None if answer is None else answer(message, head)


def _result(message: Dict[str, Any], result: Dict[str, Any]) -> Dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def _ok(message: Dict[str, Any], head: bytes) -> bytes:
    return http_response(_result(message, {"content": [{"type": "text", "text": "fine"}]}))


def _mcp_threads() -> List[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith("lattice-mcp-http") and t.is_alive()]


def _until(condition: Any, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(condition())


@pytest.mark.parametrize("mode,what", [("sse-line", "an SSE line"),
                                       ("sse-event", "an SSE event"),
                                       ("json", "the response body")])
def test_an_endless_message_fails_that_call_only(mode: str, what: str) -> None:
    with EndlessServer(mode, Script(None)) as hostile:
        with MCPServerHTTP(hostile.url + "/mcp", max_response_bytes=MiB) as server:
            with pytest.raises(MCPError) as info:
                server.call_tool("work")
            assert info.value.kind == "protocol"
            assert f"{what} is larger than max_response_bytes ({MiB} bytes)" in str(info.value)
            assert _until(lambda: bool(hostile.hung_up))
            assert server.call_tool("work").content[0]["text"] == "fine"  # still usable


def test_a_timed_out_call_against_keep_alives_leaves_nothing_behind() -> None:
    script = Script(None, None, hang_cancels=True)  # nor is the cancellation answered
    with EndlessServer("keep-alive", script) as hostile:
        server = MCPServerHTTP(hostile.url + "/mcp", timeout_ms=400)
        server.start()
        assert _until(lambda: _mcp_threads() == [])  # the GET stream was refused (405)
        began = time.monotonic()
        with pytest.raises(MCPError) as info:
            server.call_tool("work")
        gave_up = time.monotonic()
        assert info.value.kind == "timeout" and gave_up - began < 3
        # the call's thread and socket end within a second of the call giving up
        assert _until(lambda: len(hostile.hung_up) >= 1, 1.0)
        assert _until(lambda: "lattice-mcp-http" not in _mcp_threads(), 1.0), _mcp_threads()
        # close() during a second such call: it ends at once, nothing survives it
        controller = AbortController()
        errors: List[BaseException] = []
        caller = threading.Thread(target=lambda: _call(server, controller, errors))
        caller.start()
        assert _until(lambda: hostile.sent and len(hostile.requests) >= 5)
        time.sleep(0.2)
        closed = time.monotonic()
        server.close()
        caller.join(2)
        assert not caller.is_alive() and time.monotonic() - closed < 2
        assert _until(lambda: len(hostile.hung_up) >= 2, 1.0)
        assert _until(lambda: _mcp_threads() == [], 1.0), _mcp_threads()
        assert errors and isinstance(errors[0], MCPError) and errors[0].kind == "closed"
        script.release.set()


def _call(server: MCPServerHTTP, controller: AbortController,
          errors: List[BaseException]) -> None:
    try:
        server.call_tool("work", signal=controller.signal)
    except MCPError as exc:
        errors.append(exc)


def test_a_cancelled_call_closes_its_connection_at_once() -> None:
    with EndlessServer("keep-alive", Script(None)) as hostile:
        with MCPServerHTTP(hostile.url + "/mcp") as server:
            controller = AbortController()
            threading.Timer(0.3, controller.abort).start()
            with pytest.raises(MCPError) as info:
                server.call_tool("work", signal=controller.signal)
            assert info.value.kind == "cancelled"
            assert _until(lambda: bool(hostile.hung_up), 1.0)


# -- secrets ----------------------------------------------------------------------------------


def _echo_status(message: Dict[str, Any], head: bytes) -> bytes:
    return http_response(b"rejected: " + head, "400 Bad Request", "text/plain")


def _echo_rpc_error(message: Dict[str, Any], head: bytes) -> bytes:
    return http_response({"jsonrpc": "2.0", "id": message["id"], "error": {
        "code": -32000, "message": "bad credentials " + head.decode()}})


def _echo_result(message: Dict[str, Any], head: bytes) -> bytes:
    return http_response(_result(message, {"isError": True, "content": [
        {"type": "text", "text": "you sent " + head.decode()}]}))


@pytest.mark.parametrize("answer", [_echo_status, _echo_rpc_error, _echo_result])
def test_header_values_echoed_back_stay_out_of_tool_results(answer: Any) -> None:
    with EndlessServer("json", Script(answer)) as hostile:
        url = hostile.url.replace("http://", "http://me:pass-word-SECRET@") + "/mcp?key=q-SECRET"
        with MCPServerHTTP(url, headers={"Authorization": TOKEN, "X-Team": "team-SECRET-1"}
                           ) as server:
            [work] = server.tools()
            from lattice import ToolContext

            result = work({}, ToolContext(AbortController().signal, "toolu_1"))
            text = json.dumps(result.content)
            assert result.is_error and "***" in text
            for secret in ("tok-0123456789", "team-SECRET-1", "q-SECRET", "pass-word-SECRET",
                           "bWU6cGFzcy13b3JkLVNFQ1JFVA=="):  # base64 of me:pass-word-SECRET
                assert secret not in text, text


def test_url_query_values_stay_out_of_urllib3_debug_lines(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    import logging

    with EndlessServer("json", Script(_ok)) as hostile:
        with caplog.at_level(logging.DEBUG, logger="urllib3"):
            with MCPServerHTTP(hostile.url + "/mcp?token=qv-0123-SECRET&x=1") as server:
                server.call_tool("work")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")]
    assert any("/mcp?token=***&x=***" in line for line in lines), lines
    assert "qv-0123-SECRET" not in caplog.text


# -- nesting: one call fails, the server stays usable ------------------------------------------


@pytest.mark.parametrize("depth", [150, 100_000])
def test_a_deep_stdio_reply_fails_that_call_only(depth: int) -> None:
    with MCPServerStdio(sys.executable, [BROKEN, "deep"], timeout_ms=10_000) as server:
        began = time.monotonic()
        with pytest.raises(MCPError) as info:
            server.call_tool("work", {"depth": depth})
        assert info.value.kind == "protocol" and "deeper than 100" in str(info.value)
        assert time.monotonic() - began < 5  # not the call's full timeout
        assert server.call_tool("work", {"depth": 3}).content[0]["text"] == "fine"
        assert server.running
