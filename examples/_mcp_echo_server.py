"""A small MCP server over stdio, written by hand (no SDK): what ``mcp_tools.py`` starts.

MCP over stdio is JSON-RPC 2.0, one message per line: the client sends ``initialize``, then
``notifications/initialized``, then ``tools/list`` and ``tools/call`` requests. This server
offers two tools, ``echo`` and ``word_count``, and answers ``ping``.

    python examples/_mcp_echo_server.py     # then type JSON-RPC lines, or let a client do it
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

TOOLS = [
    {"name": "echo", "description": "Repeat the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "word_count", "description": "Count the words in a text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
]
VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


def call_tool(name: str, args: Dict[str, Any]) -> Dict[str, Any]:
    if name == "echo":
        return {"content": [{"type": "text", "text": str(args.get("text", ""))}]}
    if name == "word_count":
        count = len(str(args.get("text", "")).split())
        return {"content": [{"type": "text", "text": str(count)}],
                "structuredContent": {"words": count}}
    return {"content": [{"type": "text", "text": f"no tool named {name!r}"}], "isError": True}


def answer(method: str, params: Dict[str, Any]) -> Dict[str, Any]:
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {"protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "echo-server", "version": "1.0"}}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return call_tool(params.get("name", ""), params.get("arguments") or {})
    if method == "ping":
        return {}
    raise LookupError(method)


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification: nothing to answer
        reply: Dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = answer(message.get("method", ""), message.get("params") or {})
        except LookupError as exc:
            reply["error"] = {"code": -32601, "message": f"Method not found: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
