"""The loop (lattice/loop.py, calls.py, query.py): behaviours the 0.2 redesign and the
adversarial run (issue 13) pinned down. Each test failed on 0.1."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time

import pytest
from helpers import reply, tool_use

from lattice import (
    AbortController,
    Agent,
    APIConnectionError,
    BudgetExceededError,
    PromptTooLongError,
    Tool,
    ToolContext,
    define_history_store,
    tool,
)
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed


def echo_tool(name="echo", **kw):
    return Tool(name, "Echo.", {"type": "object"}, lambda a: f"{name} ran", **kw)


# -- abort by a threading.Event in a sequential batch (issue 13 #1) --------------------------

@pytest.mark.slow
def test_event_abort_storm_in_sequential_batches_leaves_every_call_answered():
    """10,000 queries; a tool sets the query's Event at a random call of the batch."""
    rng = random.Random(7)
    for n in range(10_000):
        event = threading.Event()
        fire_at = rng.randint(0, 3)
        handler = _firing_at(event, fire_at)

        uses = [tool_use("t", id=f"c{n}-{k}") for k in range(3)]
        agent = Agent(model="m", model_client=ScriptedModelClient([reply(*uses), "done"]),
                      tools=[Tool("t", "T.", {"type": "object"}, handler)])
        result = agent.prompt("go", signal=event)
        history = agent.get_history()
        assert_well_formed(history)
        answered = [b["tool_use_id"] for b in history[2]["content"]]
        assert answered == [u["id"] for u in uses]
        assert result.subtype == ("error_abort" if fire_at < 3 else "success")


def _firing_at(event, fire_at):
    count = [0]

    def handler(args):
        if count[0] == fire_at:
            event.set()
        count[0] += 1
        return "ok"

    return handler


# -- consumers cannot corrupt the history ------------------------------------------------------

def test_editing_a_yielded_message_never_changes_what_is_sent_next():
    client = ScriptedModelClient([reply("calling", tool_use("echo", id="1")), "done"])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()])
    for message in agent.query("go"):
        if message.type in ("assistant", "user"):
            message.message["content"] = "tampered"
    sent = client.requests[1].messages
    assert sent[1]["content"][0]["text"] == "calling"
    assert sent[2]["content"][0]["content"] == "echo ran"
    history = agent.get_history()
    history[0]["content"] = "tampered too"
    assert agent.get_history()[0]["content"] == "go"


def test_add_tools_during_a_query_affects_the_next_query_only():
    seen = []

    def model(request):
        seen.append(sorted(t["name"] for t in request.tools))
        if len(seen) == 1:
            return reply(tool_use("adder", id="1"))
        return "done"

    agent = Agent(model="m", model_client=FunctionModelClient(model), tools=[
        Tool("adder", "Adds a tool.", {"type": "object"},
             lambda a: agent.add_tools(echo_tool("late")) or "added")])
    agent.prompt("go")
    agent.prompt("again")
    assert seen == [["adder"], ["adder"], ["adder", "late"]]


# -- odd model output ------------------------------------------------------------------------------

def test_a_tool_name_that_is_not_a_string_and_a_call_without_id_are_answered():
    client = ScriptedModelClient([reply({"type": "tool_use", "name": ["x"], "input": {}},
                                        {"type": "tool_use", "id": "", "name": "echo",
                                         "input": {}}), "done"])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()])
    assert agent.prompt("go").result == "done"
    history = agent.get_history()
    assert_well_formed(history)
    ids = [u["id"] for u in history[1]["content"]]
    assert all(ids) and len(set(ids)) == 2
    unknown, ran = history[2]["content"]
    assert unknown["is_error"] and "Unknown tool" in unknown["content"]
    assert ran["content"] == "echo ran" and ran["tool_use_id"] == ids[1]


def test_a_reply_nested_too_deep_is_refused_before_it_enters_the_history():
    deep: object = "x"
    for _ in range(10_000):
        deep = [deep]
    agent = Agent(model="m", model_client=lambda r: reply(tool_use("echo", {"a": deep}, id="1")),
                  tools=[echo_tool()])
    with pytest.raises(APIConnectionError, match="nested deeper"):
        agent.prompt("go")
    assert agent.get_history() == [{"role": "user", "content": "go"}]


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


def test_tools_given_as_one_object_or_a_string_get_a_clear_error():
    for bad in (echo_tool(), "echo", {"echo": 1}):
        with pytest.raises(ValueError, match="tools must be a list"):
            Agent(model="m", model_client=ScriptedModelClient([]), tools=bad)


# -- async tools (issue 13 #10) -----------------------------------------------------------------

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


# -- stores: slow, failing, full (issue 13 #4, #7) --------------------------------------------

def test_a_blocking_store_write_does_not_delay_abort():
    release = threading.Event()
    writing = threading.Event()

    def append(message):
        if message.get("role") == "assistant":
            writing.set()
            release.wait(10)

    controller = AbortController()
    agent = Agent(model="m", model_client=ScriptedModelClient([reply("slow to store")]),
                  history_store=define_history_store(append=append))
    threading.Thread(target=lambda: writing.wait(10) and controller.abort()).start()
    begun = time.monotonic()
    result = agent.prompt("go", signal=controller.signal)
    took = time.monotonic() - begun
    release.set()
    assert result.subtype == "error_abort" and took < 5
    assert_well_formed(agent.get_history())


@pytest.mark.parametrize("fail_on_error", [False, True])
@pytest.mark.parametrize("fail_at", range(6))
def test_a_store_failing_at_any_write_leaves_a_loadable_transcript(fail_on_error, fail_at):
    """Inject a failure at write number ``fail_at``: what the store holds is a prefix that
    resume makes sendable; memory agrees with what the caller was shown."""
    stored = []
    writes = [0]

    def append(message):
        writes[0] += 1
        if writes[0] == fail_at + 1:
            raise OSError("disk full")
        stored.append(message)

    def replace(messages):
        stored[:] = messages

    store = define_history_store(load=lambda: list(stored), append=append, replace=replace,
                                 fail_on_error=fail_on_error)
    replies = [reply(tool_use("echo", id="1"), tool_use("echo", id="2")), "done", "again"]
    agent = Agent(model="m", model_client=ScriptedModelClient(replies), tools=[echo_tool()],
                  history_store=store)
    for prompt in ("one", "two"):
        try:
            agent.prompt(prompt)
        except Exception as exc:
            assert fail_on_error and type(exc).__name__ == "HistoryStoreError"
    assert_well_formed(agent.get_history())
    resumed = Agent(model="m", model_client=ScriptedModelClient(["later"]),
                    history_store=define_history_store(load=lambda: list(stored)))
    assert_well_formed(resumed.get_history())
    assert resumed.prompt("three").result == "later"


def test_a_real_full_disk_keeps_the_conversation_in_memory(tmp_path):
    import subprocess

    from lattice.stores import JsonlHistoryStore

    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = mount / "chat.jsonl"
        big = "x" * 6000
        agent = Agent(model="m", model_client=ScriptedModelClient([big] * 6),
                      history_store=JsonlHistoryStore(path))
        for n in range(6):
            assert agent.prompt(f"q{n}").result == big
        assert len(agent.get_history()) == 12  # memory kept everything
        resumed = Agent(model="m", model_client=ScriptedModelClient([]),
                        history_store=JsonlHistoryStore(path))
        stored = resumed.get_history()
        assert 0 < len(stored) < 12
        assert stored == agent.get_history()[:len(stored)]  # a prefix
    finally:  # lazy: the stores' open files are closed later (a failed assert keeps them)
        subprocess.run(["umount", "-l", str(mount)], check=True)


# -- endings -----------------------------------------------------------------------------------

def test_end_turn_with_an_output_contract_is_missing_output():
    ender = Tool("ender", "E.", {"type": "object"},
                 lambda a: __import__("lattice").ToolResult("stop here", end_turn=True))
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply(tool_use("ender", id="1"))]), tools=[ender],
        output_schema={"type": "object"})
    result = agent.prompt("go")
    assert result.subtype == "error_missing_output" and result.result == "stop here"


def test_overflow_with_one_turn_left_is_max_turns_and_its_usage_counts():
    def model(request):
        if request.system is None:  # the summary request
            return reply("summary", usage={"input_tokens": 3, "output_tokens": 2})
        return reply("x", stop_reason="model_context_window_exceeded",
                     usage={"input_tokens": 7, "output_tokens": 1})

    agent = Agent(model="m", model_client=model, max_turns=1, system="sys",
                  auto_compact={"threshold_tokens": 10 ** 6, "keep_recent_messages": 1})
    agent.replace_history([{"role": "user", "content": "old"}, reply("older")])
    result = agent.prompt("go")
    assert result.subtype == "error_max_turns" and result.num_turns == 1
    assert result.usage.input_tokens == 7 + 3  # the discarded reply and the summary


def test_max_budget_tokens_ends_before_the_next_request():
    usage = {"input_tokens": 60, "output_tokens": 10}
    client = ScriptedModelClient([reply(tool_use("echo", id=str(i)), usage=usage)
                                  for i in range(5)])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()], max_budget_tokens=140)
    result = agent.prompt("go")
    assert result.subtype == "error_max_budget" and result.is_error
    assert isinstance(result.error, BudgetExceededError) and len(client.requests) == 2
    assert_well_formed(agent.get_history())
    again = agent.prompt("more", max_budget_tokens=70)  # each query counts from zero
    assert again.subtype == "error_max_budget" and len(client.requests) == 3
    with pytest.raises(ValueError, match="max_budget_tokens"):
        agent.prompt("x", max_budget_tokens=0)


def test_output_format_validates_the_final_text_and_retries():
    client = ScriptedModelClient(["not json", '{"city": 5}', '{"city": "Paris"}'])
    agent = Agent(model="m", model_client=client,
                  output_format={"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]})
    result = agent.prompt("go")
    assert result.subtype == "success" and result.structured_result == {"city": "Paris"}
    assert client.requests[0].output_format["required"] == ["city"]
    assert client.requests[0].tools == []  # no submit_output tool
    feedback = [m["content"] for m in agent.get_history() if m["role"] == "user"][1:]
    assert "JSON" in feedback[0] and "city" in feedback[1]


def test_output_format_refusal_and_retry_limit():
    agent = Agent(model="m", model_client=ScriptedModelClient(
        [reply("no", stop_reason="refusal")]), output_format={"type": "object"})
    assert agent.prompt("go").subtype == "error_missing_output"
    agent = Agent(model="m", model_client=ScriptedModelClient(["a", "b"]),
                  output_format={"type": "object"}, max_output_retries=1)
    result = agent.prompt("go")
    assert result.subtype == "error_max_output_retries" and result.structured_result is None
    with pytest.raises(ValueError, match="not both"):
        Agent(model="m", model_client=ScriptedModelClient([]), output_format={"type": "object"},
              output_schema={"type": "object"})


def test_prompt_too_long_from_the_client_without_compaction_is_raised():
    def model(request):
        raise PromptTooLongError("prompt is too long", status_code=400)

    with pytest.raises(PromptTooLongError):
        Agent(model="m", model_client=model).prompt("go")


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
