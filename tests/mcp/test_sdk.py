"""lattice.mcp against a server built with the official ``mcp`` SDK (tests/mcp/sdk_server.py),
over stdio and over Streamable HTTP (SSE and JSON responses), on 127.0.0.1."""

from __future__ import annotations

import gc
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from lattice import AbortController, Agent
from lattice.mcp import MCPError, MCPServerHTTP, MCPServerStdio
from lattice.testing import ScriptedModelClient

pytest.importorskip("mcp.server.lowlevel", reason="needs the mcp SDK 2.x (the test extra, Python 3.10+)")

SERVER = str(Path(__file__).with_name("sdk_server.py"))
TOOLS = ["echo", "image", "weather", "structured_only", "fail", "explode", "slow", "chatty",
         "ask_client", "kinds"]


def http_server(*args: str) -> Iterator[str]:
    """Run the SDK server over HTTP in a subprocess; yield its URL."""
    process = subprocess.Popen([sys.executable, SERVER, "http", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=60)
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


@pytest.fixture(scope="module", params=["stdio", "http-sse", "http-json"])
def make(request):
    """A factory of (unstarted) servers of one transport, all talking to one server process
    for HTTP, or each starting its own for stdio."""
    if request.param == "stdio":
        yield lambda **options: MCPServerStdio(sys.executable, [SERVER, "stdio"], **options)
        return
    urls = http_server(*(["--json"] if request.param == "http-json" else []))
    url = next(urls)
    # The SDK server speaks 2026-07-28 too (test_the_modern_wire): these tests are of the
    # 2025-11-25 session, its server-to-client requests and notifications.
    yield lambda **options: MCPServerHTTP(url, **{"protocol_version": "2025-11-25",
                                                  **options})
    urls.close()


@pytest.fixture(scope="module")
def server(make):
    with make(timeout_ms=30_000) as started:
        yield started


def text_of(result) -> str:
    return "".join(b["text"] for b in result.content if b["type"] == "text")


def test_handshake(server):
    assert server.protocol_version == "2025-11-25"
    assert server.server_info["name"] == "sdk-test-server"
    assert server.name == "sdk-test-server"


def test_tools_come_from_every_page(server):
    tools = server.tools()
    assert [t.name for t in tools] == TOOLS  # five pages of two
    echo = tools[0]
    assert echo.description == "Echo the text back."
    assert echo.input_schema["properties"] == {"text": {"type": "string"}}
    assert echo.definition["input_schema"]["required"] == ["text"]


def test_prefix_and_allowed_tools(make, caplog):
    caplog.set_level(logging.WARNING, logger="lattice.mcp")
    with make(tool_prefix="sdk_", allowed_tools=["echo", "weather", "nope"]) as prefixed:
        assert [t.name for t in prefixed.tools()] == ["sdk_echo", "sdk_weather"]
        assert prefixed.call_tool("echo", {"text": "own name"}).content[0]["text"] == "own name"
    assert any("'nope'" in r.getMessage() for r in caplog.records)


def test_text_image_structured_and_error_results(server):
    assert server.call_tool("echo", {"text": "hi"}).content == [{"type": "text", "text": "hi"}]
    image = server.call_tool("image").content
    assert image[0] == {"type": "text", "text": "a pixel:"}
    assert image[1]["type"] == "image" and image[1]["source"]["media_type"] == "image/png"
    assert image[1]["source"]["type"] == "base64" and image[1]["source"]["data"].startswith("iVBOR")
    # With text beside it, the text is what the model reads; alone, the JSON is.
    assert text_of(server.call_tool("weather", {"city": "Oslo"})) == "Oslo: 21 C"
    assert json.loads(text_of(server.call_tool("structured_only"))) == {"answer": 42}
    failed = server.call_tool("fail")
    assert failed.is_error and text_of(failed) == "it went wrong"


def test_other_content_kinds_become_text(server):
    texts = [b["text"] for b in server.call_tool("kinds").content]
    assert texts[0].startswith("[audio of type audio/wav")
    assert texts[1] == "[resource link: notes <file:///notes.txt> (text/plain) - the notes]"
    assert texts[2] == "[embedded resource <memo://one> (text/plain)]\nembedded words"
    assert "binary" in texts[3] and "memo://two" in texts[3]


def test_json_rpc_error(server):
    with pytest.raises(MCPError) as info:
        server.call_tool("explode")
    assert info.value.kind == "rpc" and info.value.code == -32000
    assert info.value.data == {"why": "on purpose"} and "kaboom" in str(info.value)
    [explode] = [t for t in server.tools() if t.name == "explode"]
    from lattice import AbortController, ToolContext

    result = explode({}, ToolContext(AbortController().signal, "toolu_1"))
    assert result.is_error and "MCP server 'sdk-test-server'" in result.content
    assert "kaboom (JSON-RPC error -32000)" in result.content


def test_log_notifications_go_to_the_lattice_mcp_logger(server, caplog):
    caplog.set_level(logging.DEBUG, logger="lattice.mcp")
    server.call_tool("chatty")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            "careful now" in r.getMessage() for r in caplog.records):
        time.sleep(0.01)
    [record] = [r for r in caplog.records
                if "careful now" in r.getMessage() and "stderr" not in r.getMessage()]
    assert record.name == "lattice.mcp" and record.levelno == logging.WARNING
    assert "[sdk-test]" in record.getMessage()


def test_server_requests_are_answered(server):
    # The server pings us (-> {}) and asks for roots, which we do not offer (-> -32601).
    assert text_of(server.call_tool("ask_client")) == "ping ok; roots/list error -32601"


def test_an_agent_runs_the_servers_tools_in_a_parallel_batch(server):
    model = ScriptedModelClient([
        {"content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": {"text": "a"}},
                     {"type": "tool_use", "id": "t2", "name": "image", "input": {}},
                     {"type": "tool_use", "id": "t3", "name": "fail", "input": {}}]},
        "done",
    ])
    agent = Agent(model="m", model_client=model, tools=[server], parallel_tool_calls=True)
    assert agent.prompt("go").result == "done"
    results = model.requests[1].messages[-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["t1", "t2", "t3"]
    assert results[0]["content"] == [{"type": "text", "text": "a"}]
    assert results[1]["content"][1]["type"] == "image"
    assert results[2].get("is_error") is True
    sent = {t["name"] for t in model.requests[0].tools}
    assert set(TOOLS) <= sent


def test_the_querys_signal_cancels_a_slow_call(server, tmp_path):
    marker = tmp_path / "cancelled"
    model = ScriptedModelClient([
        {"content": [{"type": "tool_use", "id": "t1", "name": "slow",
                      "input": {"marker": str(marker)}}]},
    ])
    agent = Agent(model="m", model_client=model, tools=[server])
    controller, aborted = AbortController(), {}

    def abort_once_the_call_runs():  # however long the call takes to reach the server
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        aborted["at"] = time.monotonic()
        controller.abort()

    threading.Thread(target=abort_once_the_call_runs, daemon=True).start()
    result = agent.prompt("go", signal=controller.signal)
    assert result.subtype == "error_abort"
    assert time.monotonic() - aborted["at"] < 5
    deadline = time.monotonic() + 10  # notifications/cancelled reached the server's handler
    while marker.read_text() != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.read_text() == "cancelled"
    assert server.call_tool("echo", {"text": "still here"}).content[0]["text"] == "still here"


def test_many_threads_share_one_server(server):
    errors = []

    def work(n: int) -> None:
        for i in range(15):
            text = f"{n}-{i}"
            try:
                got = server.call_tool("echo", {"text": text}).content[0]["text"]
            except Exception as exc:  # reported below
                errors.append(exc)
                return
            if got != text:
                errors.append(AssertionError(f"{text} got {got}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def test_close_and_start_again(make):
    server = make()
    with server:
        assert server.running
    assert not server.running
    with pytest.raises(MCPError) as info:
        server.call_tool("echo", {"text": "x"})
    assert info.value.kind == "closed"
    with server:  # an explicit start() begins a new session
        assert server.call_tool("echo", {"text": "again"}).content[0]["text"] == "again"


@pytest.mark.parametrize("json_response", [False, True])
def test_the_modern_wire(json_response):
    """Not told a version, the client asks server/discover; the SDK server speaks
    2026-07-28, so every request carries its version, no session, no handshake."""
    urls = http_server(*(["--json"] if json_response else []))
    try:
        with MCPServerHTTP(next(urls), timeout_ms=30_000) as server:
            assert server.protocol_version == "2026-07-28"
            assert server.server_info.get("name") == "sdk-test-server"
            assert [t.name for t in server.tools()] == TOOLS
            result = server.call_tool("echo", {"text": "héllo"})
            assert text_of(result) == "héllo" and not result.is_error
    finally:
        urls.close()


def _sockets_to(port: int) -> int:
    """This process's open TCP sockets to 127.0.0.1:port (Linux: /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in inodes and int(fields[2].split(":")[1], 16) == port:
            count += 1
    return count


@pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="counts sockets in /proc")
@pytest.mark.parametrize("json_response", [False, True])
def test_timed_out_and_closed_calls_leave_no_thread_or_socket(json_response, tmp_path):
    """Issue 34: a timed-out call left a thread and a socket; close() during a call left
    threads and sockets seconds later. Garbage collection is off: nothing may wait for it
    (urllib3 forgets its pools on close without closing their sockets, and an error raised
    while handling a cut connection kept that connection in a reference cycle)."""
    urls = http_server(*(["--json"] if json_response else []))
    url = next(urls)
    port = int(url.split(":")[2].split("/")[0])
    gc.collect()
    before = set(threading.enumerate())
    gc.disable()
    try:
        server = MCPServerHTTP(url, timeout_ms=500, protocol_version="2025-11-25")
        server.start()
        with pytest.raises(MCPError) as info:
            server.call_tool("slow", {"marker": str(tmp_path / "timed-out")})
        assert info.value.kind == "timeout"
        other = MCPServerHTTP(url, timeout_ms=30_000, protocol_version="2025-11-25")
        other.start()
        errors = []

        def waiting_call():
            try:
                other.call_tool("slow", {"marker": str(tmp_path / "closed")})
            except MCPError as exc:
                errors.append(exc)

        caller = threading.Thread(target=waiting_call)
        caller.start()
        time.sleep(0.5)
        server.close()
        other.close()
        caller.join(5)
        assert errors and errors[0].kind == "closed"
        deadline = time.monotonic() + 3
        while (_sockets_to(port) or _mcp_threads(before)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _mcp_threads(before) == []
        assert _sockets_to(port) == 0
    finally:
        gc.enable()
        urls.close()


def _mcp_threads(before):
    return [t.name for t in threading.enumerate()
            if t.name.startswith("lattice-mcp") and t not in before]
