"""One tool call's path and a batch of them (lattice/tools/calls.py, SPEC 3): errors the
model can read, return values, parallel and sequential batches, async handlers."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import pytest
from helpers import (
    Fatal,
    add,
    assert_usable,
    reply,
    result_text,
    results_of,
    scripted,
    tool_use,
)

from lattice import (
    AbortController,
    Agent,
    Tool,
    ToolContext,
    ToolResult,
    tool,
)
from lattice.testing import ScriptedModelClient, assert_well_formed


def test_truncated_tool_batch_is_not_run():
    calls = []

    @tool
    def record(x: str) -> str:
        calls.append(x)
        return x

    agent, client = scripted([
        reply(tool_use("record", {"x": "a"}, "t1"), tool_use("record", {"x": "b"}, "t2"),
              stop_reason="max_tokens"),
        "done",
    ], tools=[record])
    result = agent.prompt("go")
    assert calls == [] and result.result == "done"
    results = agent.get_history()[2]["content"]
    assert all(b["is_error"] and "max_tokens" in b["content"] for b in results)
    assert [b["tool_use_id"] for b in results] == ["t1", "t2"]


def test_end_turn_tool_ends_after_writing_whole_batch():
    def finish(args):
        return ToolResult("final answer", end_turn=True)

    done = Tool("finish", "Finish.", {"type": "object", "properties": {}}, finish)
    agent, client = scripted([reply(tool_use("add", {"a": 1, "b": 2}, "t1"),
                                tool_use("finish", {}, "t2"), tool_use("add", {"a": 2, "b": 2}, "t3"))],
                         tools=[add, done])
    result = agent.prompt("x")
    assert result.subtype == "success" and result.result == "final answer"
    assert len(client.requests) == 1
    history = agent.get_history()
    assert [b["content"] for b in history[-1]["content"]] == ["3", "final answer", "4"]
    assert_well_formed(history)


def test_unknown_tool_and_handler_error_become_error_results():
    def boom(args):
        raise RuntimeError("disk on fire")

    agent, _ = scripted([reply(tool_use("nope", {}, "t1"), tool_use("boom", {}, "t2")), "ok"],
                    tools=[Tool("boom", "Boom.", {"type": "object"}, boom)])
    agent.prompt("x")
    first, second = agent.get_history()[2]["content"]
    assert first["is_error"] and "Unknown tool 'nope'" in first["content"]
    assert "boom" in first["content"]
    assert second["is_error"] and "RuntimeError: disk on fire" in second["content"]


def test_invalid_input_is_reported_and_handler_not_called():
    calls = []

    @tool
    def typed(count: int) -> str:
        calls.append(count)
        return "ok"

    agent, _ = scripted([reply(tool_use("typed", {"count": "three"}, "t1")), "ok"], tools=[typed])
    agent.prompt("x")
    block = agent.get_history()[2]["content"][0]
    assert calls == [] and block["is_error"]
    assert "Invalid input for tool 'typed'" in block["content"] and "count" in block["content"]


def test_return_values_are_normalised():
    values = {"s": "text", "d": {"k": [1, 2]}, "blocks": [{"type": "text", "text": "b"}],
              "n": None, "err": ToolResult("bad", is_error=True)}
    tools = [Tool(k, k, {"type": "object"}, (lambda v: (lambda args: v))(v)) for k, v in
             values.items()]
    agent, _ = scripted([reply(*[tool_use(k, {}, k) for k in values]), "ok"], tools=tools)
    agent.prompt("x")
    got = {b["tool_use_id"]: b for b in agent.get_history()[2]["content"]}
    assert got["s"]["content"] == "text"
    assert json.loads(got["d"]["content"]) == {"k": [1, 2]}
    assert got["blocks"]["content"] == [{"type": "text", "text": "b"}]
    assert got["n"]["content"] == "null"
    assert got["err"]["is_error"] is True and "is_error" not in got["s"]


def test_tool_exceptions_are_logged_at_warning_with_the_tool_name(caplog):
    def boom(a):
        raise RuntimeError("kaput")

    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("boom", id="1")), "ok"]),
        tools=[Tool("boom", "B.", {"type": "object"}, boom)])
    with caplog.at_level(logging.WARNING, logger="lattice"):
        agent.prompt("go")
    assert any("'boom'" in r.getMessage() and "kaput" in r.getMessage()
               and r.levelno == logging.WARNING for r in caplog.records)


def test_tool_context_reaches_hooks_and_handlers():
    seen = []

    def handler(args, context: ToolContext):
        seen.append(context.tool_use_id)
        return "ok"

    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("h", id="abc")), "done"]),
        tools=[Tool("h", "H.", {"type": "object"}, handler)])
    agent.prompt("go")
    assert seen == ["abc"]


def test_parallel_tool_calls_run_at_once_and_their_results_keep_the_call_order():
    barrier = threading.Barrier(3, timeout=5)

    def slow(args):
        barrier.wait()  # only passes if all three run at once
        return args["v"]

    t = Tool("slow", "Slow.", {"type": "object", "properties": {"v": {"type": "string"}}}, slow)
    agent, _ = scripted([reply(*[tool_use("slow", {"v": v}, v) for v in "abc"]), "ok"],
                        tools=[t], parallel_tool_calls=True)
    assert agent.prompt("x").subtype == "success"
    blocks = results_of(agent.get_history()[2])
    assert [b["tool_use_id"] for b in blocks] == ["a", "b", "c"]
    assert [result_text(b) for b in blocks] == ["a", "b", "c"]
    assert not any(b.get("is_error") for b in blocks)


def test_tool_calls_run_one_after_another_in_order_by_default():
    log = []

    @tool
    def step(tag: str) -> str:
        """Logs."""
        log.append(("start", tag))
        log.append(("end", tag))
        return tag

    agent, _ = scripted([reply(*[tool_use("step", {"tag": v}, v) for v in "abc"]), "ok"],
                        tools=[step])
    agent.prompt("x")
    assert log == [(edge, v) for v in "abc" for edge in ("start", "end")]


def test_a_base_exception_in_a_parallel_tool_is_raised_as_in_sequence():
    """Fix: ``Loop.run_parallel``'s ``work`` catches ``BaseException`` into a list; after
    the joins the worker raises the first one (as ``run_one`` in sequence would)."""

    def bad(args: Any) -> str:
        raise Fatal("boom")

    uses = [tool_use("ok", {}, "t1"), tool_use("bad", {}, "t2")]
    agent = Agent(model="m", model_client=ScriptedModelClient([reply(*uses), "fine"]),
                  parallel_tool_calls=True,
                  tools=[Tool("ok", "Ok.", {"type": "object"}, lambda a: "ok"),
                         Tool("bad", "Bad.", {"type": "object"}, bad)])
    with pytest.raises(Fatal):
        agent.prompt("go")
    assert_usable(agent)


def test_an_async_tool_runs_to_completion():
    @tool
    async def later(n: int) -> int:
        """Wait a moment."""
        await asyncio.sleep(0)
        return n * 2

    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("later", {"n": 21}, id="1")), "done"]), tools=[later])
    agent.prompt("go")
    assert agent.get_history()[2]["content"][0]["content"] == "42"


def test_an_async_tool_is_cancelled_by_the_querys_signal():
    started, cancelled = threading.Event(), threading.Event()

    @tool
    async def forever() -> str:
        """Never ends."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "no"

    controller = AbortController()
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("forever", id="1"))]), tools=[forever])
    threading.Thread(target=lambda: started.wait(10) and controller.abort()).start()
    begun = time.monotonic()
    result = agent.prompt("go", signal=controller.signal)
    assert result.subtype == "error_abort" and time.monotonic() - begun < 5
    assert cancelled.wait(5)
    assert_well_formed(agent.get_history())
