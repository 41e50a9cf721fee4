"""MCP servers as tools: ``MCPServerStdio`` (a subprocess) and ``MCPServerHTTP``
(Streamable HTTP). Hand-written and synchronous: JSON-RPC 2.0, no SDK, no asyncio.

::

    with MCPServerStdio("python", ["-m", "mcp_server_time"]) as server:
        agent = Agent(model="claude-sonnet-4-5", tools=[server])

A server's tools are ordinary ``Tool`` objects (``server.tools()``); the loop knows nothing
of MCP. Importing this module imports no third-party package (``MCPServerHTTP`` imports
``requests`` when it starts).
"""

from ._client import ElicitationPending, ElicitationRequest, Progress
from ._errors import MCPError
from ._http import MCPServerHTTP
from ._oauth import OAuth
from ._server import PROTOCOL_VERSIONS, MCPServerBase
from ._stdio import MCPServerStdio
from ._tokens import FileTokenStore, MemoryTokenStore

__all__ = ["MCPServerStdio", "MCPServerHTTP", "MCPServerBase", "MCPError", "PROTOCOL_VERSIONS",
           "OAuth", "FileTokenStore", "MemoryTokenStore", "ElicitationRequest",
           "ElicitationPending", "Progress"]
