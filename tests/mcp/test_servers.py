"""lattice.mcp against published reference servers we did not write: ``mcp-server-time``
(PyPI) and ``@modelcontextprotocol/server-everything`` (npm), both over stdio.

The npm server is installed by ``.ci/run`` into ``build/npm`` (the tests themselves use no
network); its tests skip, saying why, where node or the package is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from lattice import AbortSignal, Agent
from lattice.mcp import MCPServerStdio
from lattice.testing import ScriptedModelClient, assert_well_formed

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = Path(os.environ.get("LATTICE_MCP_EVERYTHING", ROOT / "build" / "npm")) \
    / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def use(id, name, input):
    return {"type": "tool_use", "id": id, "name": name, "input": input}


# -- mcp-server-time (PyPI) --------------------------------------------------------------

needs_time = pytest.mark.skipif(importlib.util.find_spec("mcp_server_time") is None,
                                reason="needs mcp-server-time (the test extra, Python 3.10+)")


@needs_time
def test_time_server_through_an_agent_run():
    model = ScriptedModelClient([
        {"content": [use("t1", "time_get_current_time", {"timezone": "Asia/Tokyo"}),
                     use("t2", "time_convert_time", {"source_timezone": "Europe/Paris",
                                                      "time": "09:30",
                                                      "target_timezone": "America/New_York"})]},
        {"content": [use("t3", "time_get_current_time", {"timezone": "Not/AZone"})]},
        "It is morning in Tokyo.",
    ])
    with MCPServerStdio(sys.executable, ["-m", "mcp_server_time"], tool_prefix="time_",
                        env={"TZ": "UTC"}) as server:
        agent = Agent(model="m", model_client=model, tools=[server])
        result = agent.prompt("What time is it in Tokyo?")
    assert result.subtype == "success" and result.result == "It is morning in Tokyo."
    assert [t["name"] for t in model.requests[0].tools] == ["time_get_current_time",
                                                            "time_convert_time"]
    schema = model.requests[0].tools[0]["input_schema"]
    assert schema["required"] == ["timezone"]
    first, second = model.requests[1].messages[-1]["content"]
    now = json.loads(first["content"][0]["text"])
    assert now["timezone"] == "Asia/Tokyo" and now["datetime"].endswith("+09:00")
    converted = json.loads(second["content"][0]["text"])
    assert converted["target"]["datetime"][11:16] in ("03:30", "04:30")  # EST/EDT vs CET/CEST
    [bad] = model.requests[2].messages[-1]["content"]
    assert bad["is_error"] is True and "Not/AZone" in bad["content"][0]["text"]
    assert_well_formed(agent.get_history())


@needs_time
def test_time_server_add_tools_with_allowed_tools():
    model = ScriptedModelClient(["fine"])
    agent = Agent(model="m", model_client=model)
    with MCPServerStdio(sys.executable, ["-m", "mcp_server_time"],
                        allowed_tools=["convert_time"]) as server:
        agent.add_tools(server)
        agent.prompt("hi")
    assert [t["name"] for t in model.requests[0].tools] == ["convert_time"]


# -- @modelcontextprotocol/server-everything (npm) ---------------------------------------

def everything() -> MCPServerStdio:
    if shutil.which("node") is None:
        pytest.skip("needs node (the npm reference server is a node program)")
    if not EVERYTHING.exists():
        pytest.skip(f"needs @modelcontextprotocol/server-everything in {EVERYTHING.parents[4]} "
                    "(`npm install --prefix build/npm @modelcontextprotocol/server-everything`)")
    return MCPServerStdio("node", [str(EVERYTHING), "stdio"], timeout_ms=30_000)


@pytest.fixture(scope="module")
def reference():
    with everything() as server:
        yield server


def test_everything_lists_its_tools(reference):
    names = {t.name for t in reference.tools()}
    assert {"echo", "get-sum", "get-tiny-image", "get-structured-content",
            "get-resource-links", "get-resource-reference"} <= names
    assert reference.server_info["name"] == "mcp-servers/everything"


def test_everything_content_kinds(reference):
    assert reference.call_tool("echo", {"message": "hi"}).content == [
        {"type": "text", "text": "Echo: hi"}]
    image = reference.call_tool("get-tiny-image").content
    assert [b["type"] for b in image if b["type"] == "image"] == ["image"]
    [block] = [b for b in image if b["type"] == "image"]
    assert block["source"]["media_type"] == "image/png"
    links = [b["text"] for b in reference.call_tool("get-resource-links", {"count": 2}).content]
    assert sum(t.startswith("[resource link: ") for t in links) == 2
    text = reference.call_tool("get-resource-reference",
                               {"resourceType": "Text", "resourceId": 1}).content
    assert any(b["text"].startswith("[embedded resource <demo://resource/") and "\n" in b["text"]
               for b in text)
    structured = reference.call_tool("get-structured-content", {"location": "New York"})
    assert "temperature" in json.loads(structured.content[0]["text"])


def test_everything_through_an_agent_with_a_deadline(reference):
    model = ScriptedModelClient([
        {"content": [use("t1", "get-sum", {"a": 2, "b": 3}),
                     use("t2", "trigger-long-running-operation", {"duration": 30, "steps": 3})]},
    ])
    agent = Agent(model="m", model_client=model, tools=[reference], parallel_tool_calls=True)
    began = time.monotonic()
    result = agent.prompt("add, then wait", signal=AbortSignal.timeout(1500))
    assert result.subtype == "error_abort" and time.monotonic() - began < 3
    assert_well_formed(agent.get_history())
    # The server was told to cancel and still answers.
    assert reference.call_tool("get-sum", {"a": 1, "b": 1}).content[0]["text"].endswith("2.")
