"""An ``on_elicitation`` that raises ``ElicitationPending`` ends the query ``awaiting_input``
(SPEC 23); ``elicitation=`` resumes it, in this process and in another one (a SQLite
store), against the reference server ``server-everything`` (its elicitation tool asks a
form: ``name`` required, ``check`` a boolean)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, List

import pytest

from lattice import Agent
from lattice.mcp import ElicitationPending, ElicitationRequest
from lattice.stores import SqliteHistoryStore
from lattice.testing import ScriptedModelClient

from .test_features import EVERYTHING, ROOT, everything

TOOL = "trigger-elicitation-request"


def later(request: ElicitationRequest) -> Dict[str, Any]:
    raise ElicitationPending(request)


def call(name: str, id: str = "c1") -> Dict[str, Any]:
    return {"role": "assistant", "content": [
        {"type": "tool_use", "id": id, "name": name, "input": {}}]}


def well_formed(history: List[Dict[str, Any]]) -> None:
    """Every tool_use is answered by the next message, once."""
    for i, message in enumerate(history):
        uses = [b["id"] for b in message["content"] if isinstance(message["content"], list)
                and b.get("type") == "tool_use"]
        if uses:
            answers = [b["tool_use_id"] for b in history[i + 1]["content"]]
            assert answers == uses


def test_pending_question_ends_awaiting_input_and_the_answer_resumes_it() -> None:
    with everything(on_elicitation=later) as server:
        tool_name = next(t.name for t in server.tools() if t.name.endswith(TOOL))
        model = ScriptedModelClient([call(tool_name), "Thanks, Ada."])
        agent = Agent(model="m", model_client=model, tools=[server])
        result = agent.prompt("sign me up")
        assert result.subtype == "awaiting_input" and not result.is_error
        [request] = result.pending_elicitations
        assert request.mode == "form" and request.server == "mcp-servers/everything"
        assert request.requested_schema["required"] == ["name"] and request.message
        assert [r.id for r in agent.pending_elicitations()] == [request.id]
        assert agent.pending_approvals() == []
        assert len(model.requests) == 1  # the model never saw the cancelled call's result
        with pytest.raises(ValueError, match="does not match the requested schema"):
            agent.prompt(elicitation={request.id: {"action": "accept",
                                                   "content": {"name": 5}}})
        with pytest.raises(ValueError, match="missing"):
            agent.prompt(elicitation={"other": {"action": "cancel"}})
        done = agent.prompt(elicitation={request.id: {"action": "accept", "content": {
            "name": "Ada", "check": True}}})
        assert done.subtype == "success" and done.result == "Thanks, Ada."
        sent = str(model.requests[1].messages[-1]["content"])
        assert "accept" in sent and "Ada" in sent
        assert agent.pending_elicitations() == []
        well_formed(agent.get_history())


def test_a_new_prompt_instead_of_the_answer_moves_on() -> None:
    with everything(on_elicitation=later) as server:
        tool_name = next(t.name for t in server.tools() if t.name.endswith(TOOL))
        model = ScriptedModelClient([call(tool_name), "Never mind then."])
        agent = Agent(model="m", model_client=model, tools=[server])
        assert agent.prompt("sign me up").subtype == "awaiting_input"
        assert agent.prompt("forget it").result == "Never mind then."
        history = agent.get_history()
        well_formed(history)
        [answer] = history[2]["content"]
        assert answer["is_error"] and "without giving the input" in str(answer["content"])
        assert agent.pending_elicitations() == []


def test_elicitation_without_a_pending_question_is_refused() -> None:
    agent = Agent(model="m", model_client=ScriptedModelClient(["hi"]))
    with pytest.raises(ValueError, match="no MCP server's question is waiting"):
        agent.prompt(elicitation={"x": {"action": "cancel"}})
    with pytest.raises(ValueError, match="elicitation must be a dict"):
        agent.prompt(elicitation=["x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be given together"):
        agent.prompt(approvals={}, elicitation={})


def test_awaiting_input_resumed_in_another_process(tmp_path: Any) -> None:
    everything()  # skips without node or the package
    path = tmp_path / "chat.db"
    common = textwrap.dedent(f"""
        import json
        from lattice import Agent
        from lattice.mcp import ElicitationPending, MCPServerStdio
        from lattice.stores import SqliteHistoryStore
        from lattice.testing import ScriptedModelClient

        def later(request):
            raise ElicitationPending(request)

        server = MCPServerStdio("node", [{str(EVERYTHING)!r}, "stdio"], timeout_ms=30000,
                                on_elicitation=later)
        name = next(t.name for t in server.tools() if t.name.endswith({TOOL!r}))
        store = SqliteHistoryStore({str(path)!r}, "user-1")
        use = {{"role": "assistant", "content": [
            {{"type": "tool_use", "id": "c1", "name": name, "input": {{}}}}]}}
    """)
    a = common + textwrap.dedent("""
        agent = Agent(model="m", model_client=ScriptedModelClient([use]), tools=[server],
                      history_store=store)
        result = agent.prompt("sign me up")
        print(json.dumps([result.subtype, [r.to_dict() for r in result.pending_elicitations]]))
        server.close()
    """)
    b = common + textwrap.dedent("""
        agent = Agent(model="m", model_client=ScriptedModelClient(["Welcome, Grace."]),
                      tools=[server], history_store=store)
        [request] = agent.pending_elicitations()
        result = agent.prompt(elicitation={request.id: {
            "action": "accept", "content": {"name": "Grace"}}})
        print(json.dumps([request.id, request.mode, result.subtype, result.result]))
        server.close()
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out_a = subprocess.run([sys.executable, "-c", a], env=env, capture_output=True,
                           text=True, timeout=120)
    subtype, [stored] = json.loads(out_a.stdout.strip().splitlines()[-1])
    assert subtype == "awaiting_input", out_a.stderr
    assert stored["mode"] == "form" and stored["requested_schema"]["required"] == ["name"]
    out_b = subprocess.run([sys.executable, "-c", b], env=env, capture_output=True,
                           text=True, timeout=120)
    assert json.loads(out_b.stdout.strip().splitlines()[-1]) == [
        stored["id"], "form", "success", "Welcome, Grace."], out_b.stderr
    history = Agent(model="m", model_client=ScriptedModelClient([]),
                    history_store=SqliteHistoryStore(str(path), "user-1")).get_history()
    well_formed(history)
    assert "Grace" in str(history[2]["content"])


def test_a_durable_run_records_its_questions(tmp_path: Any) -> None:
    with everything(on_elicitation=later) as server:
        tool_name = next(t.name for t in server.tools() if t.name.endswith(TOOL))
        store = SqliteHistoryStore(str(tmp_path / "runs.db"), "user-1")
        model = ScriptedModelClient([call(tool_name), "Done."])
        agent = Agent(model="m", model_client=model, tools=[server], history_store=store)
        first = agent.prompt("sign me up", run_id="r1")
        assert first.subtype == "awaiting_input"
        again = agent.prompt("sign me up", run_id="r1")  # the recorded result, replayed
        assert again.replayed and again.subtype == "awaiting_input"
        assert [r.to_dict() for r in again.pending_elicitations] == \
            [r.to_dict() for r in first.pending_elicitations]
        [request] = first.pending_elicitations
        done = agent.prompt(elicitation={request.id: {"action": "decline"}})
        assert done.result == "Done." and "decline" in str(model.requests[1].messages[-1])
