"""lattice in a notebook: run it cell by cell (``# %%`` marks a cell in VS Code, PyCharm,
Spyder and Jupytext), or as a script: ``python examples/notebook.py``.

lattice is synchronous: no ``await``, no event loop, nothing to patch in Jupyter (whose own
event loop trips up asyncio-based SDKs). ``query()`` is a plain generator, a
``ResultMessage`` renders as Markdown when it ends a cell, and ``agent.interrupt()`` works
from any thread, e.g. a button callback or a timer.

Offline by default, against the bundled local Messages server; with ``ANTHROPIC_API_KEY``
set it talks to the real API (model from ``LATTICE_MODEL``, default ``claude-sonnet-4-5``).
``LATTICE_PROVIDER=openai`` speaks Chat Completions instead (``examples/_backend.py``).
"""

# %% Setup: the real API, or the offline mock server (examples/_backend.py decides)
from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from typing import Any

from _backend import model_options

from lattice import Agent, ResultMessage
from lattice.testing import MockMessagesServer


def mock_model(body: Any) -> Any:
    """The offline model: short answers at once; an essay takes (too) long."""
    prompt = body["messages"][-1]["content"]
    if "essay" in prompt:
        return MockMessagesServer.delay(30.0, "A very long essay...")
    if "about" in prompt:
        return "We talked about the Fibonacci numbers, then you asked for an essay."
    return ("The Fibonacci numbers start 0, 1, 1, 2, 3, 5, 8, 13: "
            "each is the sum of the two before it.")


backend = ExitStack()  # open across cells; closed by the last one
options = backend.enter_context(model_options([mock_model], repeat=True))


def delta_text(event: Any) -> str:
    """The text a stream event adds: a Messages ``text_delta``, or a Chat Completions
    chunk's ``delta.content`` (LATTICE_PROVIDER=openai); events are as the provider sent them."""
    if event.get("type") == "content_block_delta" and event["delta"]["type"] == "text_delta":
        return str(event["delta"]["text"])
    if event.get("object") == "chat.completion.chunk":
        return "".join(c["delta"].get("content") or "" for c in event["choices"])
    return ""


def show(result: ResultMessage) -> None:
    """In Jupyter, ``display`` renders ``_repr_markdown_``; in a terminal, print it."""
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
        from IPython.display import display  # type: ignore[import-not-found]
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(result)
    else:
        print(result._repr_markdown_())


agent = Agent(**options, system="Answer in one or two sentences.",
              include_partial_messages=True)

# %% query(): iterate over the messages as they come; text streams in as deltas
kinds = []
for message in agent.query("What are the Fibonacci numbers?"):
    kinds.append(message.type)
    if message.type == "stream_event":
        print(delta_text(message.event), end="", flush=True)
    elif message.type == "result":
        print()
        first = message
print(f"{kinds.count('stream_event')} stream events, then {kinds[-2:]}")

# %% The ResultMessage: as the last line of a cell, Jupyter shows its Markdown form
show(first)
first  # noqa: B018 - a notebook cell's value is displayed

# %% Interrupt from another thread (a "stop" button, a timer): no asyncio needed
timer = threading.Timer(0.3, agent.interrupt)
timer.start()
started = time.monotonic()
essay = agent.prompt("Write a 3000-word essay on the history of Fibonacci numbers.")
print(f"{essay.subtype} after {time.monotonic() - started:.1f} s "
      f"(is_error={essay.is_error}); the conversation goes on:")
timer.cancel()

# %% Every completed turn is still there, so the next prompt continues the conversation
follow_up = agent.prompt("What were we talking about?")
show(follow_up)
print([m["role"] for m in agent.get_history()])

# %% Clean up
backend.close()
