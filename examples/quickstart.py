"""Quickstart: a tool-using agent, two turns of one conversation, and structured output.

Runs offline against the bundled local Messages server (``lattice.testing.MockMessagesServer``,
real HTTP on 127.0.0.1) unless ``ANTHROPIC_API_KEY`` is set; then it talks to the real API
(model from ``LATTICE_MODEL``, default ``claude-sonnet-4-5``).

    python examples/quickstart.py
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict

from _backend import model_options  # examples/_backend.py

from lattice import Agent, tool


@tool
def get_weather(city: str) -> str:
    """Look up the current weather for a city.

    Args:
        city: The city's name, e.g. "Paris".
    """
    return f"Sunny and 21 degrees Celsius in {city}."


@dataclass
class Forecast:
    city: str
    temperature_c: float
    summary: str


def mock_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """What the offline server answers: a scripted stand-in for the model."""
    last = body["messages"][-1]["content"]
    tools = {t["name"] for t in body.get("tools", [])}
    if isinstance(last, list) and last and last[0].get("type") == "tool_result":
        weather = last[0]["content"]
        if "submit_output" in tools:
            return {"content": [{"type": "tool_use", "id": "toolu_2", "name": "submit_output",
                                 "input": {"city": "Paris", "temperature_c": 21,
                                           "summary": weather}}]}
        return {"content": [{"type": "text", "text": f"Right now: {weather}"}]}
    if "submit_output" in tools or "weather" in str(last).lower():
        return {"content": [{"type": "text", "text": "Let me check."},
                            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                             "input": {"city": "Paris"}}]}
    return {"content": [{"type": "text", "text": "You asked about the weather in Paris."}]}


def main() -> None:
    with model_options([mock_model], repeat=True) as options:

        agent = Agent(**options, tools=[get_weather], max_turns=5)
        for message in agent.query("What's the weather in Paris?"):
            if message.type == "assistant":
                for use in message.tool_uses:
                    print(f"  -> tool {use['name']}({json.dumps(use['input'])})")
            elif message.type == "result":
                print(f"answer: {message.result}")

        followup = agent.prompt("Which city did I ask about?")
        print(f"follow-up: {followup.result}  [{followup.usage.input_tokens} input tokens]")

        structured = Agent(**options, tools=[get_weather], output_schema=Forecast)
        result = structured.prompt("Get the weather in Paris and submit a forecast.")
        print(f"structured: {result.structured_result}")


if __name__ == "__main__":
    main()
