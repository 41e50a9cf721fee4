"""``ScriptedModelClient`` and ``FunctionModelClient`` keep only what a test asks for."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from typing import Any, Dict, List

import pytest
from helpers import (
    MODEL,
    reply,
)

import lattice
from lattice import Agent
from lattice.models.base import ModelRequest
from lattice.testing import FunctionModelClient, ScriptedModelClient


def _growing_requests(client: Any, turns: int) -> int:
    """Send ``turns`` requests as a tool loop does (a fresh list over shared dicts, one
    more message each time); return the bytes still held once they are answered."""
    history: List[Dict[str, Any]] = []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for turn in range(turns):
            history.append({"role": "user", "content": f"message {turn}"})
            client.create(ModelRequest(model="m", messages=list(history)))
        history.clear()
        gc.collect()
        return int(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("make", [
    lambda record: FunctionModelClient(lambda request: "ok", record=record),
    lambda record: ScriptedModelClient(["ok"] * 1000, record=record),
], ids=["function", "scripted"])
def test_record_false_keeps_nothing_while_the_default_keeps_references(make: Any) -> None:
    lean = make(False)
    held = _growing_requests(lean, 1000)
    assert lean.requests == [] and lean.calls == 1000
    assert held < 100_000, held  # not the ~4 MB of 1000 ever longer message lists
    full = make(True)
    assert _growing_requests(full, 1000) > 10 * max(held, 10_000)
    assert len(full.requests) == 1000 and full.calls == 1000


def test_recorded_requests_are_the_requests_themselves() -> None:
    client = FunctionModelClient(lambda request: "ok")
    shared = {"role": "user", "content": "hi"}
    request = ModelRequest(model="m", messages=[shared])
    client.create(request)
    assert client.requests[0] is request and client.requests[0].messages[0] is shared


def test_an_agent_loop_with_record_false() -> None:
    replies = [{"content": [{"type": "text", "text": "done"}]}]
    client = ScriptedModelClient(replies, record=False)
    result = Agent(model="m", model_client=client).prompt("go")
    assert result.result == "done" and client.calls == 1 and client.requests == []
    assert repr(client) == "<ScriptedModelClient 1/1 replies used>"
    with pytest.raises(AssertionError, match="ran out of replies at request 2"):
        client.create(ModelRequest(model="m", messages=[]))


def test_calls_are_counted_across_threads() -> None:
    client = FunctionModelClient(lambda request: "ok", record=False)
    threads = [threading.Thread(target=lambda: [
        client.create(ModelRequest(model="m", messages=[])) for _ in range(200)])
        for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert client.calls == 800


@pytest.mark.parametrize("make", [
    lambda: FunctionModelClient(lambda request: "ok", record="yes"),  # type: ignore[arg-type]
    lambda: ScriptedModelClient([], record=None),  # type: ignore[arg-type]
])
def test_a_bad_record_option_names_itself(make: Any) -> None:
    with pytest.raises(ValueError, match="record must be True or False"):
        make()


# -- SPEC 10 ---------------------------------------------------------------------------------


def test_scripted_client_strings_and_requests():
    client = ScriptedModelClient(["first", reply("second")])
    agent = Agent(model=MODEL, model_client=client)
    assert agent.prompt("a").result == "first"
    assert agent.prompt("b").result == "second"
    assert len(client.requests) == 2
    assert isinstance(client.requests[0], lattice.ModelRequest)


def test_function_client_may_return_a_str():
    client = FunctionModelClient(lambda r: f"echo {len(r.messages)}")
    agent = Agent(model=MODEL, model_client=client)
    assert agent.prompt("a").result == "echo 1"
