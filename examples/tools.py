"""Tools: several of them, run in parallel, one using ToolContext, one ending the turn.

A trip-planning agent looks up the weather in two cities, flights and an exchange rate in
one batch (``parallel_tool_calls=True``: four slow lookups take the time of one), then calls
``present_plan``, whose ``ToolResult(end_turn=True)`` ends the query with the plan as the
result, without another model request.

Runs offline against the bundled local Messages server unless ``ANTHROPIC_API_KEY`` is set;
then it talks to the real API (model from ``LATTICE_MODEL``, default ``claude-sonnet-4-5``).

    python examples/tools.py
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Union

from _backend import model_options  # examples/_backend.py

from lattice import Agent, ToolContext, ToolResult, tool

LOOKUP_SECONDS = 0.3  # every lookup pretends to be a slow web service

WEATHER = {"Lisbon": "sunny, 24 °C", "Oslo": "light rain, 12 °C"}
RATES = {("EUR", "USD"): 1.08, ("USD", "EUR"): 0.93}


@tool
def get_weather(city: str) -> str:
    """Tomorrow's weather forecast for a city.

    Args:
        city: The city's name in English, e.g. "Lisbon".
    """
    time.sleep(LOOKUP_SECONDS)
    return WEATHER.get(city, "no forecast available")


@tool
def search_flights(origin: str, destination: str, context: ToolContext) -> List[Dict[str, Any]]:
    """Direct flights for tomorrow, cheapest first.

    Args:
        origin: Departure city.
        destination: Arrival city.
    """
    # A slow search that stops early when the query is aborted or interrupted.
    if context.signal.wait(LOOKUP_SECONDS):
        return []
    return [{"flight": f"LT{len(origin) * 100 + len(destination)}", "from": origin,
             "to": destination, "departs": "08:40", "price_eur": 120},
            {"flight": "LT777", "from": origin, "to": destination, "departs": "17:15",
             "price_eur": 185}]


@tool
def convert_currency(amount: float, from_currency: str,
                     to_currency: str) -> Union[str, ToolResult]:
    """Convert an amount of money between currencies (ISO codes such as EUR, USD)."""
    time.sleep(LOOKUP_SECONDS)
    rate = RATES.get((from_currency.upper(), to_currency.upper()))
    if rate is None:
        return ToolResult(f"No rate for {from_currency} -> {to_currency}.", is_error=True)
    return f"{amount:.2f} {from_currency} = {amount * rate:.2f} {to_currency}"


@tool
def present_plan(plan: str) -> ToolResult:
    """Present the finished travel plan to the traveller. Call this last: it ends the turn.

    Args:
        plan: The plan, in a few short lines.
    """
    return ToolResult(plan, end_turn=True)


TOOLS = [get_weather, search_flights, convert_currency, present_plan]


def mock_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """What the offline server answers: first every lookup in one batch, then the plan."""
    last = body["messages"][-1]["content"]
    if isinstance(last, str):
        calls = [("get_weather", {"city": "Lisbon"}), ("get_weather", {"city": "Oslo"}),
                 ("search_flights", {"origin": "Paris", "destination": "Lisbon"}),
                 ("convert_currency", {"amount": 120, "from_currency": "EUR",
                                       "to_currency": "USD"})]
        return {"content": [{"type": "text", "text": "Let me look all of that up at once."}]
                + [{"type": "tool_use", "name": n, "input": i} for n, i in calls]}
    results = [block["content"] for block in last if block.get("type") == "tool_result"]
    flights = json.loads(results[2])
    plan = (f"Go to Lisbon ({results[0]}; Oslo has {results[1]}). "
            f"Take {flights[0]['flight']} at {flights[0]['departs']} for "
            f"{flights[0]['price_eur']} EUR ({results[3].split(' = ')[1]}).")
    return {"content": [{"type": "tool_use", "name": "present_plan", "input": {"plan": plan}}]}


def main() -> None:
    with model_options([mock_model], repeat=True) as options:

        agent = Agent(**options, tools=TOOLS, parallel_tool_calls=True, max_turns=8,
                      system="You plan trips. Look up everything you need in as few turns "
                             "as possible (several tool calls per turn), then call "
                             "present_plan.")
        asked = time.monotonic()
        for message in agent.query("I'm in Paris. Lisbon or Oslo tomorrow? Find me a flight "
                                   "and tell me what 120 EUR is in USD."):
            if message.type == "assistant":
                for use in message.tool_uses:
                    print(f"  -> {use['name']}({json.dumps(use['input'], ensure_ascii=False)})")
                asked = time.monotonic()
            elif message.type == "user":
                took = time.monotonic() - asked
                count = len(message.content)
                note = (f" (one lookup takes {LOOKUP_SECONDS} s: they ran in parallel)"
                        if count > 1 else "")
                print(f"  <- {count} result{'s' if count > 1 else ''} in {took:.2f} s{note}")
            elif message.type == "result":
                print(f"plan: {message.result}")
                print(f"[{message.subtype}, {message.num_turns} model requests]")


if __name__ == "__main__":
    main()
