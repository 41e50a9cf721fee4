"""Cancellation: a deadline for a whole query, a timeout per model request, an interrupt.

1. ``signal=AbortSignal.timeout(ms)`` bounds everything a query does (model requests and
   tools together): here a slow research tool, which watches ``ToolContext.signal`` and
   stops early. The query ends as ``error_abort``.
2. ``request_timeout_ms`` bounds each model request: a reply that takes too long ends the
   query as ``error_timeout``; the late reply never enters the history.
3. ``agent.interrupt()``, from another thread, ends the running query as ``interrupted``
   (not an error); the conversation continues with the next prompt.

None of these relies on the model client or the tool cooperating: lattice races them.

Runs offline against the bundled local Messages server unless ``ANTHROPIC_API_KEY`` is set;
then it talks to the real API (model from ``LATTICE_MODEL``, default ``claude-sonnet-4-5``),
where the short limits below will usually, not always, cut the replies off.

    python examples/cancellation.py
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

from _backend import model_options  # examples/_backend.py

from lattice import AbortSignal, Agent, ToolContext, tool
from lattice.testing import assert_well_formed

SLOW_REPLY_S = 10.0  # how long the offline model takes over a long answer
tool_started, tool_stopped = threading.Event(), threading.Event()


@tool
def research(topic: str, context: ToolContext) -> str:
    """Research a topic thoroughly (slow: about a minute).

    Args:
        topic: What to research.
    """
    tool_started.set()
    for step in range(600):
        # wait() returns True as soon as the query is aborted, interrupted or timed out.
        if context.signal.wait(0.1):
            print(f"   (research noticed the signal after {step} steps and stopped)")
            tool_stopped.set()
            return "stopped early"
    return f"everything about {topic}"


def mock_model(body: Dict[str, Any]) -> Any:
    """The offline model: calls research when asked to, writes long answers slowly."""
    from lattice.testing import MockMessagesServer

    last = body["messages"][-1]["content"]
    if isinstance(last, list):  # tool results came back
        return "Here is what I found."
    if "research" in last.lower():
        return {"content": [{"type": "tool_use", "name": "research",
                             "input": {"topic": "sea otters"}}]}
    if "story" in last.lower():
        return MockMessagesServer.delay(SLOW_REPLY_S, "Once upon a time...")
    return "We were talking about sea otters."


def last_blocks(agent: Agent) -> List[Dict[str, Any]]:
    """The content blocks of the last history message ([] for a plain-text one)."""
    content = agent.get_history()[-1]["content"]
    return content if isinstance(content, list) else []


def timed(label: str, started: float, result: Any) -> None:
    print(f"{label}: {result.subtype} after {time.monotonic() - started:.2f} s"
          + (f" ({type(result.error).__name__}: {result.error})" if result.error else ""))


def main() -> None:
    with model_options([mock_model], repeat=True) as options:

        agent = Agent(**options, tools=[research])

        # 1. A deadline for the whole query: 800 ms for the model and the tool together.
        started = time.monotonic()
        result = agent.prompt("Use the research tool on sea otters, then summarise.",
                              signal=AbortSignal.timeout(800))
        if tool_started.is_set():
            tool_stopped.wait(1.0)  # the tool's thread winds down on its own
        timed("1. AbortSignal.timeout(800)", started, result)
        answers = [block["content"] for block in last_blocks(agent) if "tool_use_id" in block]
        print(f"   the model will read: {answers[0]!r}" if answers
              else "   (the abort came before any tool ran)")

        # 2. A deadline for each model request.
        started = time.monotonic()
        result = agent.prompt("Write a long story about a sea otter.",
                              request_timeout_ms=500)
        timed("2. request_timeout_ms=500", started, result)

        # 3. An interrupt from another thread (a stop button, a Ctrl-C handler, a timer).
        timer = threading.Timer(0.3, agent.interrupt)
        timer.start()
        started = time.monotonic()
        result = agent.prompt("Write another long story about a sea otter.")
        timer.cancel()  # a reply quicker than the timer must not interrupt the next query
        timed("3. agent.interrupt()", started, result)

        # The conversation is intact: every completed turn is kept.
        result = agent.prompt("What were we talking about?")
        print(f"afterwards: {result.subtype}: {result.result}")
        history = agent.get_history()
        assert_well_formed(history)  # every tool_use answered: the API will accept it
        print(f"history: {len(history)} messages, all well-formed")


if __name__ == "__main__":
    main()
