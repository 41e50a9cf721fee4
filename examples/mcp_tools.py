"""MCP servers as tools: an Agent uses the tools of a server it starts as a subprocess.

The server here is ``_mcp_echo_server.py``, a small MCP server written by hand that ships
beside this example, so everything runs offline. A published server is used the same way,
e.g. the reference time server (``pip install mcp-server-time``)::

    with MCPServerStdio(sys.executable, ["-m", "mcp_server_time"],
                        tool_prefix="time_") as time:
        agent = Agent(model="claude-sonnet-4-5", tools=[time])

or a server on the network: ``MCPServerHTTP("https://example.com/mcp", headers={...})``.

Runs offline against the bundled local Messages server unless ``ANTHROPIC_API_KEY`` is set;
then it talks to the real API (model from ``LATTICE_MODEL``, default ``claude-sonnet-4-5``).

    python examples/mcp_tools.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from _backend import model_options  # examples/_backend.py

from lattice import Agent
from lattice.mcp import MCPServerStdio

SERVER = Path(__file__).with_name("_mcp_echo_server.py")
TEXT = "the quick brown fox jumps over the lazy dog"

# What the offline mock model says: one batch calling both MCP tools, then an answer.
MOCK_REPLIES = [
    {"content": [
        {"type": "tool_use", "id": "toolu_1", "name": "text_word_count", "input": {"text": TEXT}},
        {"type": "tool_use", "id": "toolu_2", "name": "text_echo", "input": {"text": "hello"}},
    ]},
    "The sentence has 9 words, and the echo said hello.",
]


def main() -> None:
    # tool_prefix keeps this server's tools apart from others' (the server calls them
    # echo and word_count); timeout_ms bounds start-up and every call.
    with MCPServerStdio(sys.executable, [str(SERVER)], tool_prefix="text_",
                        timeout_ms=10_000) as server:
        print(f"started {server.name!r} (MCP {server.protocol_version}), tools:",
              ", ".join(t.name for t in server.tools()))
        with model_options(MOCK_REPLIES) as options:
            agent = Agent(**options, tools=[server], parallel_tool_calls=True,
                          system="Use the tools to answer.")
            for message in agent.query(f"How many words are in {TEXT!r}? Also echo 'hello'."):
                if message.type == "assistant":
                    for use in message.tool_uses:
                        print(f"  -> {use['name']}({use['input']})")
                elif message.type == "user":
                    for block in message.message["content"]:
                        shown = "".join(b.get("text", "") for b in block["content"])
                        print(f"  <- {shown}")
                elif message.type == "result":
                    print("answer:", message.result)
    print("server closed:", not server.running)


if __name__ == "__main__":
    main()
