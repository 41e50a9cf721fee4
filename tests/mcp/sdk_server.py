"""An MCP server built with the official ``mcp`` Python SDK (2.x), for tests/mcp/test_sdk.py.

    python tests/mcp/sdk_server.py stdio
    python tests/mcp/sdk_server.py http [--json]   # prints "PORT <n>", then serves

It uses the SDK's low-level ``Server`` because the high-level one cannot paginate
``tools/list``: the tools come two per page. Tools: ``echo`` (text), ``image`` (text and
a PNG), ``weather`` (structured content and its text), ``structured_only`` (structured
content, no content blocks), ``fail`` (``isError``), ``explode`` (a JSON-RPC error),
``slow`` (waits until cancelled; writes ``marker`` when the cancellation reaches it),
``chatty`` (logs to the client), ``ask_client`` (pings the client and asks it for roots),
``kinds`` (audio, a resource link, embedded text and blob resources).
"""

from __future__ import annotations

import base64
import socket
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

# The SDK marks logging and roots deprecated for a protocol version newer than ours.
warnings.simplefilter("ignore", MCPDeprecationWarning)
PAGE = 2
# A 1x1 transparent PNG.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6300010000050001"
    "0d0a2db40000000049454e44ae426082")).decode()


def _tool(name: str, description: str, properties: Dict[str, Any],
          required: List[str]) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema={
        "type": "object", "properties": properties, "required": required})


TOOLS = [
    _tool("echo", "Echo the text back.", {"text": {"type": "string"}}, ["text"]),
    _tool("image", "A tiny image.", {}, []),
    _tool("weather", "Structured weather.", {"city": {"type": "string"}}, ["city"]),
    _tool("structured_only", "Structured content only.", {}, []),
    _tool("fail", "Always reports an error.", {}, []),
    _tool("explode", "Raises a JSON-RPC error.", {}, []),
    _tool("slow", "Waits until cancelled.", {"marker": {"type": "string"}}, ["marker"]),
    _tool("chatty", "Logs to the client.", {}, []),
    _tool("ask_client", "Pings the client and asks it for its roots.", {}, []),
    _tool("kinds", "Every other kind of content.", {}, []),
]


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    page = TOOLS[start:start + PAGE]
    more = start + PAGE < len(TOOLS)
    return types.ListToolsResult(tools=page, next_cursor=str(start + PAGE) if more else None)


async def slow(marker: str) -> types.CallToolResult:
    Path(marker).write_text("started", encoding="utf-8")
    try:
        await anyio.sleep(120)
    except anyio.get_cancelled_exc_class():
        Path(marker).write_text("cancelled", encoding="utf-8")
        raise
    return types.CallToolResult(content=[text("finished")])


async def ask_client(ctx: Any) -> types.CallToolResult:
    await ctx.session.send_ping()
    try:
        await ctx.session.list_roots()
        roots = "answered"
    except MCPError as exc:
        roots = f"error {exc.code}"
    return types.CallToolResult(content=[text(f"ping ok; roots/list {roots}")])


def kinds() -> types.CallToolResult:
    blob = base64.b64encode(b"\x00\x01binary").decode()
    return types.CallToolResult(content=[
        types.AudioContent(type="audio", data=base64.b64encode(b"RIFF....").decode(),
                           mime_type="audio/wav"),
        types.ResourceLink(type="resource_link", uri="file:///notes.txt", name="notes",
                           mime_type="text/plain", description="the notes"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="memo://one", mime_type="text/plain", text="embedded words")),
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri="memo://two", mime_type="application/octet-stream", blob=blob)),
    ])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    name = params.name
    if name == "echo":
        return types.CallToolResult(content=[text(str(args["text"]))])
    if name == "image":
        return types.CallToolResult(content=[
            text("a pixel:"), types.ImageContent(type="image", data=PNG, mime_type="image/png")])
    if name == "weather":
        data = {"city": args["city"], "celsius": 21}
        return types.CallToolResult(content=[text(f"{args['city']}: 21 C")],
                                    structured_content=data)
    if name == "structured_only":
        return types.CallToolResult(content=[], structured_content={"answer": 42})
    if name == "fail":
        return types.CallToolResult(content=[text("it went wrong")], is_error=True)
    if name == "explode":
        raise MCPError(-32000, "kaboom", {"why": "on purpose"})
    if name == "slow":
        return await slow(str(args["marker"]))
    if name == "chatty":
        await ctx.session.send_log_message("warning", "careful now", logger="sdk-test")
        return types.CallToolResult(content=[text("logged")])
    if name == "ask_client":
        return await ask_client(ctx)
    if name == "kinds":
        return kinds()
    raise MCPError(-32602, f"Unknown tool: {name}")


def make_server() -> Server:
    return Server("sdk-test-server", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = make_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(json_response: bool) -> None:
    import uvicorn

    app = make_server().streamable_http_app(json_response=json_response)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        serve_http("--json" in sys.argv)
    else:
        anyio.run(serve_stdio)
