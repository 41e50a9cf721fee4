"""``MCPError``: what went wrong talking to an MCP server, with ``.kind`` saying which way.

It sits under ``LatticeError`` (``LatticeError`` → ``MCPError``). A tool handler built by
``server.tools()`` never raises it into the loop: the Agent's model reads it as the text of
an ``is_error`` tool_result. Calling a server directly (``start()``, ``call_tool()``) raises it.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import LatticeError

__all__ = ["MCPError", "KINDS"]

# Every .kind, and what it means (one table, so messages and tests agree on the words).
KINDS = {
    "start": "the server could not be started or the handshake failed",
    "version": "the server answered with a protocol version lattice does not speak",
    "timeout": "no reply within timeout_ms",
    "cancelled": "the caller's signal fired while waiting",
    "closed": "the server exited, the HTTP session ended, or close() was called",
    "rpc": "the server answered with a JSON-RPC error (.code, .data)",
    "protocol": "the server sent something that is not MCP (bad JSON, an oversized message)",
    "http": "the HTTP request failed (connection error or an error status)",
    "auth": "no token could be had (OAuth discovery, registration, consent or token)",
}


class MCPError(LatticeError):
    """An MCP server could not do what was asked; ``.server`` names it, ``.kind`` says why."""

    def __init__(self, server: str, kind: str, message: str, *, code: Optional[int] = None,
                 data: Any = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown MCPError kind {kind!r}")
        super().__init__(f"MCP server {server!r}: {message}")
        self.server = server
        self.kind = kind
        self.code = code
        self.data = data
