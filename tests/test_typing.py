"""The public API as a type checker sees it (issue 12): ``mypy --strict`` on a small user
program using the README's code finds no error and no ``Any`` leaking from lattice."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = textwrap.dedent('''
    from dataclasses import dataclass

    from lattice import (Agent, AnthropicClient, OpenAIChatClient, PostgresHistoryStore,
                         ResultMessage, ToolCall, tool)
    from lattice.testing import MockMessagesServer, ScriptedModelClient


    @tool
    def get_weather(city: str) -> str:
        """Look up the current weather."""
        return f"Sunny, 21 C in {city}"


    @dataclass
    class Forecast:
        city: str
        temperature_c: float


    agent = Agent(model="claude-sonnet-4-5", tools=[get_weather],
                  model_client=ScriptedModelClient(["ok"]))
    result: ResultMessage = agent.prompt("What's the weather in Paris?")
    reveal_type(result)
    reveal_type(agent.query("x"))
    for message in agent.query("and then?"):
        reveal_type(message)
    reveal_type(AnthropicClient)
    reveal_type(OpenAIChatClient)
    reveal_type(MockMessagesServer)
    reveal_type(PostgresHistoryStore)
    reveal_type(result.usage)
    reveal_type(agent.pending_approvals())
    calls: list[ToolCall] = agent.pending_approvals()
    typed = Agent(model="m", model_client=ScriptedModelClient([]), output_schema=Forecast)
    reveal_type(typed.prompt("Forecast for Paris, please."))
''')


@pytest.mark.slow
def test_mypy_strict_on_the_readme_program_sees_no_any(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="needs mypy (test extra)")
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(program)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "MYPYPATH": str(ROOT)})
    out = done.stdout + done.stderr
    assert not re.search(r": error:", out), out
    revealed = re.findall(r'Revealed type is "(.*)"', out)
    assert len(revealed) == 10, out
    for line in revealed:
        assert line != "Any" and not line.startswith("Any"), out
    # mypy spells the union "A | B" on 3.10+ and "Union[A, B]" on 3.9.
    assert re.search(r"AssistantMessage(, | \| )lattice\.messages\.UserMessage",
                     revealed[2]), revealed[2]
    # generic in the structured output's type (issue 33): Any without an output schema
    assert revealed[0] == "lattice.messages.ResultMessage[Any]"
    assert revealed[-1] == "lattice.messages.ResultMessage[prog.Forecast]", revealed[-1]


WRONG = textwrap.dedent('''
    from typing import Any, Dict

    from dataclasses import dataclass

    from lattice import (Agent, ModelRequest, MemoryHistoryStore, Query, ResultMessage,
                         create_agent, define_history_store, follow, tool)
    from lattice.testing import ScriptedModelClient


    @dataclass
    class Forecast:
        city: str


    @tool
    def now() -> str:
        """The time."""
        return "noon"


    def plain(request: ModelRequest) -> Dict[str, Any]:
        return {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}


    # A plain callable request -> dict is a model client too (SPEC 2), as is a store of
    # callables; neither is an error.
    Agent(model="m", model_client=plain, history_store=MemoryHistoryStore())
    Agent(model="m", model_client=lambda request: {"role": "assistant", "content": []},
          history_store=define_history_store())
    agent = Agent(model="m", model_client=ScriptedModelClient(["ok"]))
    query: Query = agent.query("hi")
    result: ResultMessage = agent.prompt("hi", request_timeout_ms=None, max_budget_tokens=5)

    Agent(model="m", model_client=42)  # E: model_client
    Agent(model="m", model_client=ScriptedModelClient([]), history_store="nope")  # E: store
    agent.prompt("hi", request_timeout_ms="soon")  # E: request_timeout_ms
    agent.query("hi", max_budget_tokens=1.5)  # E: max_budget_tokens
    if result.subtype == "sucess":  # E: not an ending
        pass
    call_id: int = result.pending_approvals[0].id  # E: pending_approvals holds ToolCalls

    # Right: a typed output, tools, a store to follow.
    typed = Agent(model="m", model_client=ScriptedModelClient([]), output_schema=Forecast,
                  tools=[now])
    forecast: Forecast = typed.prompt("Paris?").structured_result
    also: Forecast = create_agent(model="m", output_schema=Forecast).prompt("x").structured_result
    typed.add_tools(now, lambda city: city)
    for item in follow(MemoryHistoryStore(), wait_s=0):
        pass
    # Wrong (issue 33): each passed mypy --strict in 0.3.
    create_agent(model="m", model_client=42)  # E: model_client
    follow("not a store")  # E: not a store
    Agent(model="m", output_schema=17)  # E: output_schema
    Agent(model="m", tools=[1, 2])  # E: tools
    agent.add_tools(42)  # E: a tool
    wrong: int = typed.prompt("Paris?").structured_result  # E: a Forecast, not an int
''')


def test_mypy_strict_rejects_wrong_uses_of_the_public_api(tmp_path: Path) -> None:
    """SPEC 16a: options typed with the protocols, the unset sentinel an Enum, the result's
    subtype a Literal of the endings, ``pending_approvals`` typed, ``Query`` public: each
    marked line is an error, and only those."""
    pytest.importorskip("mypy", reason="needs mypy (test extra)")
    program = tmp_path / "wrong.py"
    program.write_text(WRONG, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), str(program)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "MYPYPATH": str(ROOT)})
    out = done.stdout + done.stderr
    marked = {n for n, line in enumerate(WRONG.splitlines(), 1) if "# E:" in line}
    found = {int(n) for n in re.findall(r"wrong\.py:(\d+): error:", out)}
    assert found == marked, out
