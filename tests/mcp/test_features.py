"""Resources, templates, prompts, elicitation, roots, progress and logging against the
reference server ``@modelcontextprotocol/server-everything`` (npm; ``.ci/run`` installs it
into ``build/npm``), over stdio."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

from lattice import Agent
from lattice.mcp import ElicitationRequest, MCPServerStdio, Progress
from lattice.testing import ScriptedModelClient

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = Path(os.environ.get("LATTICE_MCP_EVERYTHING", ROOT / "build" / "npm")) \
    / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def everything(**options: Any) -> MCPServerStdio:
    if shutil.which("node") is None:
        pytest.skip("needs node (the npm reference server is a node program)")
    if not EVERYTHING.exists():
        pytest.skip(f"needs @modelcontextprotocol/server-everything in {EVERYTHING.parents[4]} "
                    "(`npm install --prefix build/npm @modelcontextprotocol/server-everything`)")
    return MCPServerStdio("node", [str(EVERYTHING), "stdio"], timeout_ms=30_000, **options)


def test_resources_templates_and_reading() -> None:
    with everything() as server:
        listed = server.resources()
        assert listed and all("uri" in r for r in listed)
        templates = server.resource_templates()
        assert any(t["uriTemplate"] == "demo://resource/dynamic/text/{resourceId}"
                   for t in templates)
        [block] = server.read_resource("demo://resource/dynamic/text/1")
        assert block["type"] == "text" and block["text"]
        [blob] = server.read_resource("demo://resource/dynamic/blob/1")
        assert blob["type"] == "text" and blob["text"].startswith("[binary resource ")


def test_prompts_become_history_ready_for_an_agent() -> None:
    with everything() as server:
        assert {"simple-prompt", "args-prompt"} <= {p["name"] for p in server.prompts()}
        messages = server.get_prompt("args-prompt", {"city": "Paris"})
        assert messages[-1]["role"] == "user"
        assert "Paris" in messages[-1]["content"][0]["text"]
        model = ScriptedModelClient(["Sunny."])
        agent = Agent(model="m", model_client=model)
        assert agent.prompt(messages[-1]["content"]).result == "Sunny."
        assert "Paris" in str(model.requests[0].messages[-1]["content"])


def test_elicitation_is_answered_by_the_callback_and_declined_without_one() -> None:
    asked: List[ElicitationRequest] = []

    def answer(request: ElicitationRequest) -> Dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"name": "Ada", "check": True}}

    with everything(on_elicitation=answer) as server:
        text = str(server.call_tool("trigger-elicitation-request").content)
    [request] = asked
    assert request.mode == "form" and request.server == "mcp-servers/everything"
    assert request.requested_schema["required"] == ["name"]
    assert "accept" in text and "Ada" in text
    with everything() as server:  # no callable: no capability declared, no such tool
        assert "trigger-elicitation-request" not in {t["name"] for t in server.list_tools()}


def test_without_a_callable_a_question_is_declined_politely() -> None:
    from lattice.mcp._client import Features

    features = Features(lambda: "s", None, None, None)
    assert features.capabilities() == {}
    assert features.elicit({"message": "Name?", "requestedSchema": {"type": "object"}}) \
        == {"action": "decline"}


def test_an_answer_that_does_not_fit_the_schema_is_refused() -> None:
    with everything(on_elicitation=lambda r: {"action": "accept",
                                              "content": {"name": 5}}) as server:
        result = server.call_tool("trigger-elicitation-request")
    assert "does not match the requested schema" in str(result.content)


def test_roots_progress_and_logging(caplog: pytest.LogCaptureFixture) -> None:
    seen: List[Progress] = []
    with everything(roots=[{"uri": "file:///tmp/work", "name": "work"}],
                    on_progress=seen.append) as server:
        assert "file:///tmp/work" in str(server.call_tool("get-roots-list").content)
        server.call_tool("trigger-long-running-operation", {"duration": 1, "steps": 2})
        assert [(p.progress, p.total) for p in seen] == [(1, 2), (2, 2)]
        assert len({p.token for p in seen}) == 1
        with caplog.at_level(logging.DEBUG, logger="lattice.mcp"):
            server.set_logging_level("debug")
        with pytest.raises(ValueError, match="level must be one of"):
            server.set_logging_level("loud")


def test_resources_as_tools_gives_the_model_a_reader() -> None:
    with everything(resources_as_tools=True, tool_prefix="ev_") as server:
        tools = {t.name: t for t in server.tools()}
        assert "ev_read_resource" in tools
        model = ScriptedModelClient([
            {"content": [{"type": "tool_use", "id": "t1", "name": "ev_read_resource",
                          "input": {"uri": "demo://resource/dynamic/text/2"}}]}, "Read."])
        agent = Agent(model="m", model_client=model, tools=[server])
        assert agent.prompt("read it").result == "Read."
        [tool_result] = model.requests[1].messages[-1]["content"]
        assert tool_result["is_error"] is False if "is_error" in tool_result else True
        assert "text" in str(tool_result["content"])
