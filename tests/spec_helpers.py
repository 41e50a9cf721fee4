"""Helpers for the SPEC conformance tests (tests/test_spec_conformance*.py).

Only the public API named in SPEC.md is used here, as an outside tester would.
"""

import json
import threading

from lattice import Agent
from lattice.testing import FunctionModelClient, ScriptedModelClient

MODEL = "test-model"


def tu(name, input=None, id=None):
    """A tool_use block."""
    return {"type": "tool_use", "id": id or f"toolu_{name}", "name": name,
            "input": {} if input is None else input}


def reply(*blocks, stop_reason=None, usage=None, **extra):
    """An assistant reply dict; strings become text blocks."""
    content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
    out = {"role": "assistant", "content": content}
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) \
            else "end_turn"
    out["stop_reason"] = stop_reason
    if usage is not None:
        out["usage"] = usage
    out.update(extra)
    return out


def scripted(replies, **options):
    client = ScriptedModelClient(replies)
    return Agent(model=MODEL, model_client=client, **options), client


def function_agent(fn, **options):
    client = FunctionModelClient(fn)
    return Agent(model=MODEL, model_client=client, **options), client


def run(agent, prompt="hi", **query_options):
    return list(agent.query(prompt, **query_options))


def text_of(content):
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content
                   if isinstance(b, dict) and b.get("type") == "text")


def results_of(message):
    """The tool_result blocks of a history dict (or a UserMessage)."""
    message = getattr(message, "message", message)
    content = message["content"]
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block):
    """The text of a tool_result block's content (str or text blocks)."""
    return text_of(block.get("content", ""))


def assert_well_formed(history):
    """Every tool_use is answered by a tool_result with its id in the next message."""
    json.dumps(history)  # JSON-serialisable at all times
    for i, message in enumerate(history):
        assert message["role"] in ("user", "assistant"), message
        content = message["content"]
        if message["role"] != "assistant" or not isinstance(content, list):
            continue
        ids = [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not ids:
            continue
        assert i + 1 < len(history), f"unanswered tool_use at the end: {history}"
        nxt = history[i + 1]
        assert nxt["role"] == "user", history
        answered = [b["tool_use_id"] for b in results_of(nxt)]
        assert sorted(answered) == sorted(ids), (ids, answered)


class Gates:
    """Events that block a fake client/tool; all released when the test ends."""

    def __init__(self):
        self._events = []

    def new(self):
        event = threading.Event()
        self._events.append(event)
        return event

    def release_all(self):
        for event in self._events:
            event.set()


def in_thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t
