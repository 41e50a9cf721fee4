"""Overflow recovery through the loop (SPEC 9): compact once and retry, else raise the original error"""
import json

import pytest
from helpers import (
    BIG,
    MODEL,
    SMALL,
    SUMMARY,
    LoopModel,
    is_summary,
    loop_is_summary,
    reply,
    run,
)
from helpers import COMPACT_MARK as MARK
from helpers import LOOP_BIG as BIG_LOOP
from helpers import LOOP_SMALL as SMALL_LOOP
from helpers import SummaryModel as Model
from helpers import compact_agent as make
from helpers import loop_agent as agent_for
from helpers import loop_turn as turn

# -- Overflow recovery through the loop (SPEC 9): compact once and retry, else raise the original error ---
from lattice import (
    Agent,
    APIConnectionError,
    AutoCompact,
    PromptTooLongError,
    Tool,
)
from lattice.testing import FunctionModelClient, assert_well_formed


def test_prompt_too_long_recovers_once():
    model = Model(reply("r1"), PromptTooLongError("prompt is too long", status_code=400),
                  reply("r2", usage=SMALL))
    agent, replaced = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    agent.prompt("q1")
    messages = run(agent, "q2")
    assert [m.type for m in messages] == ["system", "assistant", "result"]
    assert messages[-1].result == "r2"
    assert messages[-1].usage.input_tokens >= 7 + 5
    assert len(model.summaries) == 1 and len(replaced) == 1
    assert len(model.normal[2].messages) == 1  # retried the same turn on the compacted history


def test_context_window_exceeded_reply_is_discarded_and_recovered():
    model = Model(reply("r1"), reply("PARTIAL-OUTPUT", stop_reason="model_context_window_exceeded"),
                  reply("r2"))
    agent, _ = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    agent.prompt("q1")
    messages = run(agent, "q2")
    assert [m.type for m in messages] == ["system", "assistant", "result"]
    assert messages[-1].result == "r2"
    assert "PARTIAL-OUTPUT" not in json.dumps(agent.get_history())


def test_second_overflow_in_the_same_query_is_raised():
    second = PromptTooLongError("prompt is too long again", status_code=400)
    model = Model(reply("r1"), PromptTooLongError("prompt is too long", status_code=400),
                  second, reply("never"))
    agent, _ = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    agent.prompt("q1")
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("q2")
    assert info.value is second
    assert len(model.summaries) == 1


def test_nothing_to_summarise_raises_the_original_error():
    original = PromptTooLongError("prompt is too long", status_code=400)
    model = Model(original)
    agent, _ = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("only message")
    assert info.value is original
    assert model.summaries == []


def test_failed_recovery_compaction_raises_the_original_error():
    original = PromptTooLongError("prompt is too long", status_code=400)
    model = Model(reply("r1"), original, summary=APIConnectionError("summary failed"))
    agent, _ = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    agent.prompt("q1")
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("q2")
    assert info.value is original
    assert_well_formed(agent.get_history())


def test_stop_reason_trigger_with_nothing_to_summarise():
    model = Model(reply("cut", stop_reason="model_context_window_exceeded"))
    agent, _ = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    with pytest.raises(PromptTooLongError, match="model_context_window_exceeded"):
        agent.prompt("only message")
    assert "cut" not in json.dumps(agent.get_history())


def test_without_auto_compact_overflow_is_raised():
    original = PromptTooLongError("prompt is too long", status_code=400)

    def fn(request):
        raise original

    agent = Agent(model=MODEL, model_client=fn)
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("q")
    assert info.value is original

    agent = Agent(model=MODEL, model_client=lambda r: reply(
        "x", stop_reason="model_context_window_exceeded"))
    with pytest.raises(PromptTooLongError, match="model_context_window_exceeded"):
        agent.prompt("q")
    assert_well_formed(agent.get_history())


def test_max_tokens_stop_never_triggers_recovery():
    model = Model(reply("r1"), reply("trunc", stop_reason="max_tokens"))
    agent, _ = make(model, threshold_tokens=10**9, keep_recent_messages=1)
    agent.prompt("q1")
    r = agent.prompt("q2")
    assert (r.subtype, r.result, r.stop_reason) == ("success", "trunc", "max_tokens")
    assert model.summaries == []


@pytest.mark.parametrize("how", ["abort", "timeout"])
def test_summary_call_abort_or_timeout_ends_the_query(how):
    from lattice import AbortController

    release = __import__("threading").Event()
    controller = AbortController()

    def fn(request):
        if is_summary(request):
            if how == "abort":
                controller.abort()
            release.wait(10)
            return reply(SUMMARY)
        return reply("r1", usage=BIG)

    options = {"request_timeout_ms": 100} if how == "timeout" else {}
    agent = Agent(model=MODEL, model_client=FunctionModelClient(fn), **options,
                  auto_compact={"threshold_tokens": 100, "keep_recent_messages": 1,
                                "prompt": MARK})
    try:
        agent.prompt("q1")
        r = agent.prompt("q2", signal=controller.signal)
    finally:
        release.set()
    assert r.subtype == ("error_abort" if how == "abort" else "error_timeout")
    assert_well_formed(agent.get_history())


# -- with a tool loop ------------------------------------------------------------------------


echo = Tool("echo", "Echo.", {"type": "object"}, lambda a: "echoed")


def test_prompt_too_long_recovers_by_compacting_and_retrying():
    model = LoopModel([turn(1), turn(2), PromptTooLongError("prompt is too long", status_code=400),
                   reply("recovered")])
    agent = agent_for(model)
    result = agent.prompt("x")
    assert result.subtype == "success" and result.result == "recovered"
    assert len(model.summaries) == 1
    assert_well_formed(agent.get_history(), strict_roles=True)


def test_context_window_exceeded_reply_discarded_and_recovered():
    model = LoopModel([turn(1), turn(2), reply("partial", stop_reason="model_context_window_exceeded"),
                   reply("recovered")])
    agent = agent_for(model)
    result = agent.prompt("x")
    assert result.result == "recovered"
    assert all("partial" not in str(m["content"]) for m in agent.get_history())


def test_overflow_without_auto_compact_raises():
    model = LoopModel([PromptTooLongError("prompt is too long", status_code=400)])
    agent = Agent(model="m", model_client=FunctionModelClient(model))
    with pytest.raises(PromptTooLongError):
        agent.prompt("x")
    model = LoopModel([reply("p", stop_reason="model_context_window_exceeded")])
    agent = Agent(model="m", model_client=FunctionModelClient(model))
    with pytest.raises(PromptTooLongError, match="model_context_window_exceeded"):
        agent.prompt("x")


def test_second_overflow_in_same_query_is_raised():
    model = LoopModel([turn(1), turn(2), PromptTooLongError("too long 1"), turn(3), turn(4),
                   PromptTooLongError("too long 2")])
    agent = agent_for(model)
    with pytest.raises(PromptTooLongError, match="too long 2"):
        agent.prompt("x")
    assert_well_formed(agent.get_history())


def test_recovery_with_nothing_to_summarise_raises_original():
    original = PromptTooLongError("the original", status_code=400)
    model = LoopModel([original])
    agent = agent_for(model)
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("x")
    assert info.value is original and model.summaries == []


def test_recovery_whose_compaction_fails_raises_original():
    original = PromptTooLongError("the original", status_code=400)
    model = LoopModel([turn(1), turn(2), original], fail_summary=RuntimeError("summary broke"))
    agent = agent_for(model)
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("x")
    assert info.value is original


def test_max_tokens_never_compacts():
    model = LoopModel([reply("cut", stop_reason="max_tokens", usage=SMALL_LOOP)])
    agent = agent_for(model)
    assert agent.prompt("x").stop_reason == "max_tokens" and model.summaries == []


def test_summary_call_is_raced_against_timeout():
    import time

    def slow_summary(request):
        if loop_is_summary(request):
            time.sleep(5)
        return turn(1, BIG_LOOP) if len(request.messages) == 1 else reply("done")

    agent = Agent(model="m", model_client=slow_summary, tools=[echo], request_timeout_ms=100,
                  auto_compact=AutoCompact(threshold_tokens=500, keep_recent_messages=1))
    t0 = time.monotonic()
    result = agent.prompt("x")
    assert result.subtype == "error_timeout" and time.monotonic() - t0 < 3
    assert_well_formed(agent.get_history())


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


def test_prompt_too_long_from_the_client_without_compaction_is_raised():
    def model(request):
        raise PromptTooLongError("prompt is too long", status_code=400)

    with pytest.raises(PromptTooLongError):
        Agent(model="m", model_client=model).prompt("go")
