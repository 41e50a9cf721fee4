"""Structured output: pull a typed dataclass out of a paragraph of text.

``output_schema=Meeting`` gives the model a ``submit_output`` tool whose input schema is
built from the dataclass; lattice validates what the model submits and hands back a
``Meeting`` instance. An invalid submission is sent back to the model with the validation
errors, and it tries again: the offline model below makes one such mistake on purpose.

Runs offline against the bundled local Messages server unless ``ANTHROPIC_API_KEY`` is set;
then it talks to the real API (model from ``LATTICE_MODEL``, default ``claude-sonnet-4-5``).

    python examples/structured_output.py
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from _backend import model_options  # examples/_backend.py

from lattice import Agent

PARAGRAPH = """\
Hi all, quick note after this morning's call. We agreed to hold the quarterly planning
review on 14 March 2025 at 10:30 in the Harbour Room (3rd floor). Priya Raman will chair;
Tom Becker and Ana Sousa will present the roadmap, and Li Wei joins remotely for the
budget part. Please send slides to Priya by the 12th. Budget for the offsite dinner is
capped at 450 euros."""


@dataclass
class Person:
    name: str
    role: str  # "chair", "presenter" or "attendee"
    remote: bool = False


@dataclass
class Meeting:
    title: str
    date: str  # ISO 8601, e.g. "2025-03-14"
    time: str  # 24-hour "HH:MM"
    location: str
    people: List[Person]
    deadlines: List[str] = field(default_factory=list)
    budget_eur: Optional[float] = None


def mock_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """The offline model: reads the paragraph with regular expressions. Its first
    submission forgets the required ``people`` field; the validation error it gets back
    makes it submit again, complete."""
    text = body["messages"][0]["content"]
    day, year = _find(r"(\d{1,2}) March (\d{4})", text)
    payload: Dict[str, Any] = {
        "title": "Quarterly planning review",
        "date": f"{year}-03-{int(day):02d}",
        "time": _find(r"\b(\d{1,2}:\d{2})\b", text)[0],
        "location": "Harbour Room, 3rd floor",
        "deadlines": ["Slides to Priya Raman by 2025-03-12"],
        "budget_eur": float(_find(r"(\d+) euros", text)[0]),
    }
    retrying = len(body["messages"]) > 1
    if retrying:
        payload["people"] = [
            {"name": "Priya Raman", "role": "chair"},
            {"name": "Tom Becker", "role": "presenter"},
            {"name": "Ana Sousa", "role": "presenter"},
            {"name": "Li Wei", "role": "attendee", "remote": True},
        ]
    return {"content": [{"type": "tool_use", "name": "submit_output", "input": payload}]}


def _find(pattern: str, text: str) -> Tuple[str, ...]:
    match = re.search(pattern, text)
    if match is None:
        raise ValueError(f"the offline model cannot find {pattern!r} in the text")
    return match.groups()


def main() -> None:
    with model_options([mock_model], repeat=True) as options:

        agent = Agent(**options, output_schema=Meeting, max_turns=4,
                      system="Extract the meeting described by the user. Dates as "
                             "YYYY-MM-DD, times as HH:MM (24-hour). Roles: chair, "
                             "presenter or attendee.")
        for message in agent.query(PARAGRAPH):
            if message.type == "user":
                for block in message.content:
                    if block.get("is_error"):
                        print(f"  rejected, the model is told: {block['content']!r}")
            elif message.type == "result":
                result = message

        meeting = result.structured_result
        if not isinstance(meeting, Meeting):
            raise SystemExit(f"no meeting extracted: {result.subtype} {result.error}")
        print(f"extracted: {meeting.title} on {meeting.date} at {meeting.time}, "
              f"{meeting.location}")
        for person in meeting.people:
            print(f"  {person.name:<12} {person.role}{' (remote)' if person.remote else ''}")
        print(f"  deadlines: {meeting.deadlines}; budget: {meeting.budget_eur} EUR")
        print(f"[{result.subtype} after {result.num_turns} model requests; "
              f"structured_result is a {type(meeting).__name__}, people are "
              f"{type(meeting.people[0]).__name__} objects]")


if __name__ == "__main__":
    main()
