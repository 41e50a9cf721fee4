"""A broken stdio server (tests/mcp/broken_server.py): every fault is an is_error result or
an MCPError naming the server and the cause, in bounded time; nothing is left running."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lattice import AbortController, ToolContext
from lattice.mcp import MCPError, MCPServerStdio

BROKEN = str(Path(__file__).with_name("broken_server.py"))


def broken(mode: str, **options) -> MCPServerStdio:
    options.setdefault("timeout_ms", 10_000)
    return MCPServerStdio(sys.executable, [BROKEN, mode], **options)


def context(signal=None) -> ToolContext:
    return ToolContext(signal or AbortController().signal, "toolu_1")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[1].split()[0] == "Z"


def test_server_exiting_mid_call_gives_its_exit_code_and_stderr():
    with broken("exit") as server:
        [work] = server.tools()
        began = time.monotonic()
        result = work({}, context())
        assert time.monotonic() - began < 5
        assert result.is_error
        assert "MCP server 'broken'" in result.content
        assert "exited with code 3" in result.content
        assert "fatal: out of cheese" in result.content
        assert not server.running
        # A dead server is not restarted silently: the next call fails at once, the same way.
        again = work({}, context())
        assert again.is_error and "exited with code 3" in again.content
        with pytest.raises(MCPError) as info:
            server.call_tool("work")
        assert info.value.kind == "closed" and info.value.server == "broken"


def test_a_silent_server_times_out_and_is_told_to_cancel():
    with broken("silent") as server:
        # Started (a Python process: seconds on a loaded machine) under the generous
        # default; the short bound is for the call.
        [work] = server.tools()
        server.timeout_ms = 300
        began = time.monotonic()
        result = work({}, context())
        elapsed = time.monotonic() - began
        assert result.is_error and "no reply to tools/call within 300 ms" in result.content
        assert 0.25 < elapsed < 10
        deadline = time.monotonic() + 5
        while "cancelled 3" not in server.stderr_tail() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "cancelled 3" in server.stderr_tail()  # ids: 1 initialize, 2 tools/list, 3


def test_per_call_timeout_overrides_the_servers():
    with broken("silent") as server:
        with pytest.raises(MCPError) as info:
            server.call_tool("work", timeout_ms=200)
        assert info.value.kind == "timeout"


def test_signal_cancels_a_call_within_a_second():
    controller = AbortController()
    with broken("silent") as server:
        [work] = server.tools()
        threading.Timer(0.2, controller.abort).start()
        began = time.monotonic()
        result = work({}, context(controller.signal))
        assert time.monotonic() - began < 1.2
        assert result.is_error and "cancelled" in result.content


def test_threading_event_as_signal_is_polled():
    event = threading.Event()
    with broken("silent") as server:
        threading.Timer(0.2, event.set).start()
        began = time.monotonic()
        with pytest.raises(MCPError) as info:
            server.call_tool("work", signal=event)
        assert info.value.kind == "cancelled" and time.monotonic() - began < 1.2


def test_garbage_on_stdout_is_named_in_the_error(caplog):
    caplog.set_level(logging.WARNING, logger="lattice.mcp")
    with broken("garbage", timeout_ms=500) as server:
        result = server.tools()[0]({}, context())
    assert result.is_error
    assert "not JSON-RPC" in result.content and "{not json either" in result.content
    assert any("Traceback (most recent call last): not JSON" in r.getMessage()
               for r in caplog.records)


def test_huge_output_arrives_whole():
    size = 8 * 1024 * 1024
    with broken("huge") as server:
        result = server.call_tool("work", {"size": size})
    assert result.content[0]["text"] == "x" * size


def test_a_message_over_the_limit_ends_the_session():
    server = broken("huge")
    server.max_message_bytes = 100_000
    with server:
        result = server.tools()[0]({"size": 200_000}, context())
        assert result.is_error and "more than 100000 bytes" in result.content
        assert not server.running


def test_server_requests_are_answered():
    with broken("ask") as server:
        result = server.call_tool("work")
    # ping -> {}, an unsupported request -> -32601 Method not found
    assert result.content[0]["text"] == "[{}, -32601]"


def test_start_is_bounded_by_timeout_ms():
    server = broken("hang_start", timeout_ms=300)
    began = time.monotonic()
    with pytest.raises(MCPError) as info:
        server.start()
    assert time.monotonic() - began < 3
    assert info.value.kind == "timeout" and "initialize" in str(info.value)
    assert not server.running


def test_a_command_that_does_not_exist():
    server = MCPServerStdio("no-such-command-lattice-test")
    with pytest.raises(MCPError) as info:
        server.start()
    assert info.value.kind == "start" and "no-such-command-lattice-test" in str(info.value)


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_supported_protocol_versions_are_accepted(version):
    with broken(f"version:{version}") as server:
        assert server.protocol_version == version
        assert server.call_tool("work").content[0]["text"] == "fine"


def test_an_unknown_protocol_version_is_a_clear_error():
    server = broken("version:1999-01-01")
    with pytest.raises(MCPError) as info:
        server.start()
    assert info.value.kind == "version"
    assert "'1999-01-01'" in str(info.value) and "2025-06-18" in str(info.value)
    assert not server.running


def test_close_kills_a_server_that_ignores_sigterm_and_eof():
    server = broken("stubborn").start()
    process = server._transport.process
    began = time.monotonic()
    server.close()
    assert time.monotonic() - began < 5
    assert process.poll() is not None


def test_close_ends_what_the_server_started():
    with broken("child") as server:
        with pytest.raises(MCPError):
            server.call_tool("work", timeout_ms=500)
        pid = int(re.search(r"child (\d+)", server.stderr_tail()).group(1))
        assert not gone(pid)
    deadline = time.monotonic() + 5
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone(pid)


def test_a_call_waiting_when_close_is_called_returns_at_once():
    server = broken("silent").start()
    [work] = server.tools()
    results = []
    caller = threading.Thread(target=lambda: results.append(work({}, context())))
    caller.start()
    deadline = time.monotonic() + 5
    while "call 3" not in server.stderr_tail() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "call 3" in server.stderr_tail()  # the server has the call: it is waiting
    server.close()
    caller.join(5)
    assert results and results[0].is_error and "was closed" in results[0].content


def test_nothing_is_left_running_at_interpreter_exit(tmp_path):
    script = tmp_path / "leave_it.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from lattice.mcp import MCPServerStdio
        kept = MCPServerStdio(sys.executable, [{BROKEN!r}, "stubborn"]).start()
        dropped = MCPServerStdio(sys.executable, [{BROKEN!r}, "silent"]).start()
        print(kept._transport.process.pid, dropped._transport.process.pid, flush=True)
    """))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    deadline = time.monotonic() + 5
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(gone(p) for p in pids)
