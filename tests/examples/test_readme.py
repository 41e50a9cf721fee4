"""The README's quickstart runs as written (against the local mock server), and the
promise of no asyncio: an agent runs inside a running event loop, as in Jupyter."""
import asyncio
import re
from pathlib import Path

from lattice import Agent
from lattice.testing import MockMessagesServer, ScriptedModelClient

README = Path(__file__).resolve().parents[2] / "README.md"


def fake_model(body):
    """Plays the model for the quickstart: calls the weather tool, then answers."""
    last = body["messages"][-1]["content"]
    tools = [t["name"] for t in body.get("tools", [])]
    if isinstance(last, list) and last and last[0].get("type") == "tool_result":
        if "submit_output" in tools:
            return {"content": [{"type": "tool_use", "id": "toolu_9", "name": "submit_output",
                                 "input": {"city": "Paris", "temperature_c": 21}}]}
        return f"It is: {last[0]['content']}"
    if "submit_output" in tools or "weather" in str(last).lower():
        return {"content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                             "input": {"city": "Paris"}}]}
    return "That was Paris."


def test_readme_quickstart_runs(monkeypatch, capsys):
    code = re.search(r"## Quickstart\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    with MockMessagesServer([fake_model] * 10) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
        assert server.requests[0]["model"] == "claude-sonnet-4-5"
    out = capsys.readouterr().out.splitlines()
    assert out == ["It is: Sunny, 21 C in Paris", "That was Paris.",
                   "Forecast(city='Paris', temperature_c=21.0)"]


def test_agent_runs_inside_a_running_event_loop():
    async def notebook_cell():
        agent = Agent(model="m", model_client=ScriptedModelClient(["no asyncio needed"]))
        return agent.prompt("hi").result  # a plain blocking call inside a coroutine

    assert asyncio.run(notebook_cell()) == "no asyncio needed"


def test_readme_tells_of_durable_runs_background_runs_follow_and_the_test_programs():
    text = README.read_text(encoding="utf-8")
    for needed in ("run_id=", "docs/durable-runs.md", "docs/background-runs.md",
                   "lattice.follow(", "apt-get install redis-server chromium chromium-driver"):
        assert needed in text, needed
