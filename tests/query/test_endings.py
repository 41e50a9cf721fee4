"""Endings (lattice/query/endings.py): one table, one conversion to ResultMessage."""

import threading

import pytest
from helpers import (
    function_agent,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    AbortController,
    MissingOutputError,
    ResultMessage,
    Tool,
    ToolResult,
    Usage,
)
from lattice.query.endings import ENDINGS, Ending
from lattice.testing import assert_well_formed


def test_every_result_subtype_has_one_row():
    assert set(ENDINGS) == {"success", "interrupted", "awaiting_approval", "error_max_turns",
                          "error_abort", "error_timeout", "error_missing_output",
                          "error_max_output_retries", "error_max_budget", "closed", "raised"}
    assert all(kind.is_error == name.startswith("error") for name, kind in ENDINGS.items()
               if name not in ("closed", "raised"))


def test_the_result_subtype_literal_is_the_tables_result_rows():
    from typing import get_args

    from lattice.query.endings import ResultSubtype

    assert set(get_args(ResultSubtype)) == set(ENDINGS) - {"closed", "raised"}
    assert [name for name, kind in ENDINGS.items() if not kind.cancels] == [
        "success", "awaiting_approval"]  # the endings that leave work in flight alone


def test_to_result_fills_the_last_text_and_the_stats():
    error = MissingOutputError("x")
    result = Ending("error_missing_output", error=error).to_result(
        last_text=lambda: "last", usage=Usage(1, 2), stop_reason="end_turn", num_turns=3,
        duration_ms=4)
    assert isinstance(result, ResultMessage) and result.is_error and result.result == "last"
    assert (result.usage.output_tokens, result.num_turns, result.error) == (2, 3, error)


def test_raised_endings_raise_and_unknown_subtypes_are_refused():
    with pytest.raises(KeyError):
        Ending.raised(KeyError("boom")).to_result(last_text=lambda: None, usage=Usage(),
                                                  stop_reason=None, num_turns=0, duration_ms=0)
    with pytest.raises(ValueError, match="unknown ending"):
        Ending("nope")


# -- end_turn and max_tokens (SPEC 3) --------------------------------------------------------


def only_results(agent, index=2):
    return results_of(agent.get_history()[index])


def test_end_turn_first_in_batch_order_whole_batch_written_no_more_requests():
    calls = []

    def make(name, result):
        def handler(_input):
            calls.append(name)
            return result
        return Tool(name, name, {"type": "object"}, handler)

    tools = [make("plain", "p"), make("fin1", ToolResult("first final", end_turn=True)),
             make("fin2", ToolResult([{"type": "text", "text": "second"}], end_turn=True))]
    agent, client = scripted([reply(tool_use("plain", {}, "a"), tool_use("fin1", {}, "b"),
                                    tool_use("fin2", {}, "c"))], tools=tools)
    messages = run(agent)
    r = messages[-1]
    assert r.subtype == "success" and r.is_error is False
    assert r.result == "first final"
    assert r.num_turns == 1
    assert calls == ["plain", "fin1", "fin2"]
    assert len(client.requests) == 1
    assert [m.type for m in messages] == ["assistant", "user", "result"]
    assert [b["tool_use_id"] for b in only_results(agent)] == ["a", "b", "c"]
    assert_well_formed(agent.get_history())


def test_end_turn_in_parallel_batch_uses_batch_order():
    b_done = threading.Event()

    def slow_first(_input):
        b_done.wait(5)
        return ToolResult("from A", end_turn=True)

    def fast_second(_input):
        b_done.set()
        return ToolResult("from B", end_turn=True)

    tools = [Tool("a", "a", {"type": "object"}, slow_first),
             Tool("b", "b", {"type": "object"}, fast_second)]
    agent, _ = scripted([reply(tool_use("a", {}, "1"), tool_use("b", {}, "2"))], tools=tools,
                        parallel_tool_calls=True)
    assert agent.prompt("go").result == "from A"


def test_max_tokens_on_text_is_success_with_truncated_text():
    agent, _ = scripted([reply("The answer is", stop_reason="max_tokens")])
    r = agent.prompt("go")
    assert (r.subtype, r.is_error, r.result, r.stop_reason) == (
        "success", False, "The answer is", "max_tokens")


def test_max_tokens_with_tool_use_runs_nothing_and_continues():
    calls = []
    t = Tool("write", "Write.", {"type": "object"}, lambda i: calls.append(i) or "written")
    agent, client = scripted([
        reply(tool_use("write", {"text": "a"}, "t1"), tool_use("write", {"text": "b"}, "t2"),
              stop_reason="max_tokens"),
        "ok, shorter",
    ], tools=[t])
    r = agent.prompt("go")
    assert calls == []
    blocks = only_results(agent)
    assert [b["tool_use_id"] for b in blocks] == ["t1", "t2"]
    for block in blocks:
        assert block.get("is_error") is True
        assert "max_tokens" in result_text(block)
        assert "short" in result_text(block).lower()
    assert r.subtype == "success" and r.result == "ok, shorter" and len(client.requests) == 2
    assert_well_formed(agent.get_history())


def test_end_turn_with_block_content_and_result_stop_reason():
    fin = Tool("fin", "F.", {"type": "object"}, lambda i: ToolResult(
        [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}],
        end_turn=True))
    agent, _ = scripted([reply(tool_use("fin", {}, "f1"))], tools=[fin])
    r = agent.prompt("go")
    assert r.result == "part one, part two" and r.stop_reason == "tool_use"


# -- no reply --------------------------------------------------------------------------------


def test_result_text_none_when_no_reply():
    controller = AbortController()
    controller.abort()
    agent, _ = scripted(["never"])
    r = agent.prompt("go", signal=controller.signal)
    assert r.result is None and r.num_turns == 0


# -- max_turns and provider errors (SPEC 3) --------------------------------------------------


def test_max_turns_result():
    @lattice.tool
    def again() -> str:
        """Again."""
        return "more"

    agent, client = function_agent(lambda r: reply("step", tool_use("again", {}, f"t{len(r.messages)}")),
                                   tools=[again], max_turns=3)
    messages = run(agent)
    r = messages[-1]
    assert r.subtype == "error_max_turns" and r.is_error is True
    assert r.num_turns == 3 and len(client.requests) == 3
    assert r.result == "step"
    assert_well_formed(agent.get_history())


def test_max_turns_result_carries_an_exception():
    agent, _ = function_agent(lambda r: reply("step", tool_use("again", {}, f"t{len(r.messages)}")),
                              tools=[lattice.tool(lambda: "more", name="again")], max_turns=1)
    r = agent.prompt("hi")
    assert r.subtype == "error_max_turns"
    assert isinstance(r.error, BaseException)


def test_provider_errors_raise_from_prompt_and_query():
    def fail(request):
        raise lattice.AuthenticationError("bad key", status_code=401)

    agent, _ = function_agent(fail)
    with pytest.raises(lattice.AuthenticationError):
        agent.prompt("hi")
    with pytest.raises(lattice.AuthenticationError):
        run(agent, "again")
    assert_well_formed(agent.get_history())
    assert all(m["role"] == "user" for m in agent.get_history())
