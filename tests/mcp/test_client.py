"""lattice.mcp without a server: content mapping, the JSON-RPC core, options, tool making,
and how an Agent takes tool providers (``lattice_tools()``)."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from lattice import Agent, Tool, ToolResult
from lattice.mcp import MCPError, MCPServerHTTP, MCPServerStdio
from lattice.mcp._content import to_tool_result
from lattice.mcp._rpc import RPCSession
from lattice.testing import ScriptedModelClient
from lattice.tools.definition import flatten_tools

PNG = "iVBORw0KGgo="

# -- content -------------------------------------------------------------------------------


@pytest.mark.parametrize("item, block", [
    ({"type": "text", "text": "hi"}, {"type": "text", "text": "hi"}),
    ({"type": "image", "data": PNG, "mimeType": "image/png"},
     {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}),
    ({"type": "image", "data": PNG, "mimeType": "image/svg+xml"},
     {"type": "text", "text": "[image of type image/svg+xml (9 bytes), which cannot be shown]"}),
    ({"type": "audio", "data": "A" * 40000, "mimeType": "audio/mpeg"},
     {"type": "text", "text": "[audio of type audio/mpeg (29 KiB), which cannot be played here]"}),
    ({"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
     {"type": "text", "text": "[resource link: a <file:///a.txt>]"}),
    ({"type": "resource", "resource": {"uri": "x://1", "text": "body"}},
     {"type": "text", "text": "[embedded resource <x://1>]\nbody"}),
    ({"type": "resource", "resource": {"uri": "x://2", "mimeType": "image/png", "blob": PNG}},
     {"type": "text", "text": "[embedded resource <x://2> (image/png): binary, 9 bytes, not shown]"}),
    ({"type": "hologram"}, {"type": "text", "text": "[content of unsupported type 'hologram']"}),
    ("just a string", {"type": "text", "text": "[content that is not an object: 'just a string']"}),
])
def test_each_content_kind(item, block):
    assert to_tool_result({"content": [item]}).content == [block]


def test_structured_content_alone_is_its_json_text():
    result = to_tool_result({"content": [], "structuredContent": {"a": [1, "é"]}})
    assert result.content == [{"type": "text", "text": '{"a": [1, "é"]}'}]
    both = to_tool_result({"content": [{"type": "text", "text": "A is 1"}],
                           "structuredContent": {"a": 1}})
    assert both.content == [{"type": "text", "text": "A is 1"}]


def test_is_error_and_empty_results():
    assert to_tool_result({"content": [{"type": "text", "text": "no"}], "isError": True}) == \
        ToolResult([{"type": "text", "text": "no"}], is_error=True)
    assert to_tool_result({}) == ToolResult("", is_error=False)
    assert to_tool_result({"content": [], "isError": True}) == ToolResult("", is_error=True)


# -- the JSON-RPC core ------------------------------------------------------------------------


class Wire:
    """A transport stand-in: records what is sent, replies when told to."""

    def __init__(self) -> None:
        self.sent = []
        self.sent_event = threading.Event()
        self.session = RPCSession("unit", self.send)

    def send(self, message):
        self.sent.append(message)
        self.sent_event.set()

    def answer_next(self, reply) -> threading.Thread:
        def run():
            self.sent_event.wait(5)
            request = self.sent[-1]
            self.session.receive(reply(request))
        thread = threading.Thread(target=run)
        thread.start()
        return thread


def test_replies_are_matched_by_id_even_as_strings_and_in_batches():
    wire = Wire()
    wire.answer_next(lambda r: [{"jsonrpc": "2.0", "method": "notifications/progress"},
                                {"jsonrpc": "2.0", "id": str(r["id"]), "result": {"ok": 1}}])
    assert wire.session.request("x", timeout_ms=5000) == {"ok": 1}
    assert wire.sent[0] == {"jsonrpc": "2.0", "id": 1, "method": "x"}


@pytest.mark.parametrize("reply, kind, words", [
    ({"error": {"code": -32602, "message": "bad args", "data": [1]}}, "rpc",
     "x failed: bad args (JSON-RPC error -32602)"),
    ({"result": [1, 2]}, "protocol", "the result of x is not a JSON object"),
])
def test_errors_in_replies(reply, kind, words):
    wire = Wire()
    wire.answer_next(lambda r: {"jsonrpc": "2.0", "id": r["id"], **reply})
    with pytest.raises(MCPError) as info:
        wire.session.request("x", timeout_ms=5000)
    assert info.value.kind == kind and words in str(info.value)
    assert str(info.value).startswith("MCP server 'unit': ")


def test_fail_wakes_every_waiter_and_later_requests_fail_at_once():
    wire = Wire()
    errors = []

    def wait():
        try:
            wire.session.request("x", timeout_ms=30_000)
        except MCPError as exc:
            errors.append(exc)

    waiters = [threading.Thread(target=wait) for _ in range(5)]
    for w in waiters:
        w.start()
    while len(wire.sent) < 5:
        wire.sent_event.wait(0.01)
    wire.session.fail("closed", "the server process exited with code 1")
    for w in waiters:
        w.join(5)
    assert len(errors) == 5 and len({id(e) for e in errors}) == 5  # one instance each
    assert all(e.kind == "closed" for e in errors)
    with pytest.raises(MCPError, match="exited with code 1"):
        wire.session.request("y", timeout_ms=30_000)


def test_late_replies_and_noise_are_logged_not_raised(caplog):
    caplog.set_level(logging.DEBUG, logger="lattice.mcp")
    wire = Wire()
    wire.session.receive({"jsonrpc": "2.0", "id": 99, "result": {}})
    wire.session.receive({"hello": "world"})
    wire.session.receive(42)
    assert "2 line(s) that are not JSON-RPC" in wire.session.noise_note()
    assert any("no one waits" in r.getMessage() for r in caplog.records)


def test_server_requests_get_answers():
    wire = Wire()
    wire.session.receive({"jsonrpc": "2.0", "id": "a", "method": "ping"})
    wire.session.receive({"jsonrpc": "2.0", "id": 7, "method": "roots/list"})
    assert wire.sent == [{"jsonrpc": "2.0", "id": "a", "result": {}},
                         {"jsonrpc": "2.0", "id": 7, "error": {
                             "code": -32601, "message": "Method not found: roots/list"}}]


@pytest.mark.parametrize("level, expected", [("debug", logging.DEBUG), ("notice", logging.INFO),
                                             ("error", logging.ERROR),
                                             ("emergency", logging.CRITICAL)])
def test_log_levels(caplog, level, expected):
    caplog.set_level(logging.DEBUG, logger="lattice.mcp")
    Wire().session.receive({"jsonrpc": "2.0", "method": "notifications/message",
                            "params": {"level": level, "data": {"n": 1}}})
    [record] = caplog.records
    assert record.levelno == expected and record.getMessage() == "MCP server 'unit': " + \
        json.dumps({"n": 1})


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, words", [
    ({"timeout_ms": 0}, "timeout_ms"), ({"timeout_ms": True}, "timeout_ms"),
    ({"timeout_ms": "5"}, "timeout_ms"), ({"tool_prefix": None}, "tool_prefix"),
    ({"allowed_tools": "echo"}, "allowed_tools"), ({"allowed_tools": [1]}, "allowed_tools"),
    ({"name": ""}, "name"),
])
def test_bad_options_name_themselves(options, words):
    for make in (lambda: MCPServerStdio("python", **options),
                 lambda: MCPServerHTTP("http://127.0.0.1:1/mcp", **options)):
        with pytest.raises(ValueError) as info:
            make()
        assert words in str(info.value)


def test_bad_stdio_options():
    with pytest.raises(ValueError, match="command"):
        MCPServerStdio("")
    with pytest.raises(ValueError, match="args"):
        MCPServerStdio("python", "-m x")
    with pytest.raises(ValueError) as info:
        MCPServerStdio("python", env={"TOKEN": 123456789})
    assert "env" in str(info.value) and "123456789" not in str(info.value)


def test_stdio_repr_hides_arguments_and_environment():
    server = MCPServerStdio("npx", ["server", "--token", "sk-arg-secret"],
                            env={"API_KEY": "sk-env-secret"})
    assert "sk-" not in repr(server) and repr(server) == \
        "<MCPServerStdio 'npx' command='npx' not running>"


def test_calls_before_start_say_so():
    with pytest.raises(MCPError) as info:
        MCPServerStdio("python").call_tool("x")
    assert info.value.kind == "closed" and "not running" in str(info.value)


def test_tool_names_and_schemas_from_the_server():
    server = MCPServerStdio("python", tool_prefix="fs.")
    made = server._make_tool({"name": "read/file", "title": "Read a file",
                              "inputSchema": {"type": "object",
                                              "properties": {"p": {"type": "nonsense"}}}})
    assert made.name == "fs_read_file" and made.description == "Read a file"
    # lattice cannot check that schema; the model still sees it as the server gave it.
    assert made.definition["input_schema"]["properties"]["p"] == {"type": "nonsense"}
    plain = server._make_tool({"name": "x" * 200})
    assert plain.name == ("fs_" + "x" * 200)[:128] and plain.input_schema["type"] == "object"


# -- tool providers in an Agent -----------------------------------------------------------------


class Provider:
    def __init__(self) -> None:
        self.asked = 0

    def lattice_tools(self):
        self.asked += 1
        return [Tool("provided", "From a provider.", {"type": "object"}, lambda args: "p")]


def test_flatten_tools_expands_providers_only():
    def plain(x: int) -> int:
        return x

    provider = Provider()
    made = Tool("own", "", {"type": "object"}, lambda args: "o")
    flat = flatten_tools([made, plain, provider])
    assert flat[0] is made and [t.name for t in flat] == ["own", "plain", "provided"]


def test_agents_take_providers_in_tools_and_add_tools():
    model = ScriptedModelClient([
        {"content": [{"type": "tool_use", "id": "t1", "name": "provided", "input": {}}]}, "ok"])
    agent = Agent(model="m", model_client=model, tools=[Provider()])
    assert agent.prompt("x").result == "ok"
    assert model.requests[1].messages[-1]["content"][0]["content"] == "p"
    with pytest.raises(ValueError, match="duplicate tool name 'provided'"):
        agent.add_tools(Provider())


def test_an_aborted_signal_sends_nothing():
    from lattice import AbortController

    wire = Wire()
    controller = AbortController()
    controller.abort()
    with pytest.raises(MCPError) as info:
        wire.session.request("tools/call", timeout_ms=5000, signal=controller.signal)
    assert info.value.kind == "cancelled" and wire.sent == []


def test_a_request_that_cannot_be_encoded_leaves_nothing_pending():
    wire = Wire()

    def refuse(message):
        raise TypeError("not JSON serializable")

    wire.session._send = refuse
    with pytest.raises(TypeError):
        wire.session.request("x", timeout_ms=5000)
    assert wire.session._pending == {}
