"""SPEC section 9 through the loop: threshold compaction and overflow recovery."""
import logging

import pytest
from helpers import reply, tool_use

from lattice import (
    DEFAULT_COMPACTION_PROMPT,
    Agent,
    AutoCompact,
    MemoryHistoryStore,
    PromptTooLongError,
    Tool,
)
from lattice.testing import FunctionModelClient, assert_well_formed

BIG = {"input_tokens": 900, "output_tokens": 10}
SMALL = {"input_tokens": 50, "output_tokens": 10}
SUMMARY_USAGE = {"input_tokens": 300, "output_tokens": 40}
echo = Tool("echo", "Echo.", {"type": "object"}, lambda a: "echoed")


def is_summary(request):
    return request.tools == [] and "<transcript>" in str(request.messages[-1]["content"])


class Model:
    """Answers summary requests with a summary, others from a script."""

    def __init__(self, script, summary="SUMMARY OF EARLIER WORK", fail_summary=None):
        self.script = list(script)
        self.summary = summary
        self.fail_summary = fail_summary
        self.requests = []
        self.summaries = []

    def __call__(self, request):
        self.requests.append(request)
        if is_summary(request):
            self.summaries.append(request)
            if self.fail_summary is not None:
                raise self.fail_summary
            return reply(self.summary, usage=SUMMARY_USAGE)
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def turn(i, usage=SMALL):
    return reply(f"working {i}", tool_use("echo", {}, f"t{i}"), usage=usage)


def agent_for(model, **options):
    options.setdefault("auto_compact", AutoCompact(threshold_tokens=500, keep_recent_messages=2))
    return Agent(model="m", model_client=FunctionModelClient(model), tools=[echo], **options)


def test_threshold_compaction_between_turns():
    model = Model([turn(1), turn(2), turn(3, BIG), reply("done", usage=SMALL)])
    store = MemoryHistoryStore()
    agent = agent_for(model, history_store=store)
    messages = list(agent.query("do the task"))
    system = [m for m in messages if m.type == "system"]
    assert len(system) == 1 and system[0].subtype == "compaction"
    assert system[0].compacted_messages == 5
    assert system[0].usage.to_dict()["input_tokens"] == 300
    result = messages[-1]
    assert result.subtype == "success" and result.num_turns == 4
    assert result.usage.input_tokens == 50 * 3 + 900 + 300
    summary_request = model.summaries[0]
    assert summary_request.tools == [] and DEFAULT_COMPACTION_PROMPT in \
        summary_request.messages[-1]["content"]
    after = model.requests[-1]
    assert "SUMMARY OF EARLIER WORK" in str(after.messages[0]["content"])
    assert_well_formed(after.messages, strict_roles=True)
    history = agent.get_history()
    assert_well_formed(history, strict_roles=True)
    assert store.load() == history  # the store got replace(), then the appends


def test_no_usage_never_compacts():
    model = Model([reply("a", tool_use("echo", {}, "t1")), reply("b", tool_use("echo", {}, "t2")),
                   reply("done")])
    agent = agent_for(model, auto_compact=AutoCompact(threshold_tokens=1, keep_recent_messages=1))
    assert agent.prompt("x").subtype == "success" and model.summaries == []


def test_threshold_from_previous_query_compacts_before_next_first_request():
    model = Model([reply("first", usage=BIG), reply("second", usage=SMALL)])
    agent = agent_for(model, auto_compact=AutoCompact(threshold_tokens=500,
                                                      keep_recent_messages=1))
    agent.prompt("one")
    assert model.summaries == []
    messages = list(agent.query("two"))
    assert [m.type for m in messages] == ["system", "assistant", "result"]
    assert "SUMMARY" in str(model.requests[-1].messages[0]["content"])


def test_failed_threshold_compaction_is_logged_and_skipped(caplog):
    model = Model([turn(1, BIG), reply("done")], fail_summary=RuntimeError("summary broke"))
    agent = agent_for(model)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        result = agent.prompt("x")
    assert result.subtype == "success" and "compaction failed" in caplog.text
    assert len(model.summaries) == 1


def test_prompt_too_long_recovers_by_compacting_and_retrying():
    model = Model([turn(1), turn(2), PromptTooLongError("prompt is too long", status_code=400),
                   reply("recovered")])
    agent = agent_for(model)
    result = agent.prompt("x")
    assert result.subtype == "success" and result.result == "recovered"
    assert len(model.summaries) == 1
    assert_well_formed(agent.get_history(), strict_roles=True)


def test_context_window_exceeded_reply_discarded_and_recovered():
    model = Model([turn(1), turn(2), reply("partial", stop_reason="model_context_window_exceeded"),
                   reply("recovered")])
    agent = agent_for(model)
    result = agent.prompt("x")
    assert result.result == "recovered"
    assert all("partial" not in str(m["content"]) for m in agent.get_history())


def test_overflow_without_auto_compact_raises():
    model = Model([PromptTooLongError("prompt is too long", status_code=400)])
    agent = Agent(model="m", model_client=FunctionModelClient(model))
    with pytest.raises(PromptTooLongError):
        agent.prompt("x")
    model = Model([reply("p", stop_reason="model_context_window_exceeded")])
    agent = Agent(model="m", model_client=FunctionModelClient(model))
    with pytest.raises(PromptTooLongError, match="model_context_window_exceeded"):
        agent.prompt("x")


def test_second_overflow_in_same_query_is_raised():
    model = Model([turn(1), turn(2), PromptTooLongError("too long 1"), turn(3), turn(4),
                   PromptTooLongError("too long 2")])
    agent = agent_for(model)
    with pytest.raises(PromptTooLongError, match="too long 2"):
        agent.prompt("x")
    assert_well_formed(agent.get_history())


def test_recovery_with_nothing_to_summarise_raises_original():
    original = PromptTooLongError("the original", status_code=400)
    model = Model([original])
    agent = agent_for(model)
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("x")
    assert info.value is original and model.summaries == []


def test_recovery_whose_compaction_fails_raises_original():
    original = PromptTooLongError("the original", status_code=400)
    model = Model([turn(1), turn(2), original], fail_summary=RuntimeError("summary broke"))
    agent = agent_for(model)
    with pytest.raises(PromptTooLongError) as info:
        agent.prompt("x")
    assert info.value is original


def test_max_tokens_never_compacts():
    model = Model([reply("cut", stop_reason="max_tokens", usage=SMALL)])
    agent = agent_for(model)
    assert agent.prompt("x").stop_reason == "max_tokens" and model.summaries == []


def test_summary_call_is_raced_against_timeout():
    import time

    def slow_summary(request):
        if is_summary(request):
            time.sleep(5)
        return turn(1, BIG) if len(request.messages) == 1 else reply("done")

    agent = Agent(model="m", model_client=slow_summary, tools=[echo], request_timeout_ms=100,
                  auto_compact=AutoCompact(threshold_tokens=500, keep_recent_messages=1))
    t0 = time.monotonic()
    result = agent.prompt("x")
    assert result.subtype == "error_timeout" and time.monotonic() - t0 < 3
    assert_well_formed(agent.get_history())


def test_dict_and_true_forms():
    assert agent_for(Model([]), auto_compact=True)._settings.auto_compact == AutoCompact()
    agent = agent_for(Model([]), auto_compact={"threshold_tokens": 10})
    assert agent._settings.auto_compact.threshold_tokens == 10


@pytest.mark.parametrize("keep", range(0, 9))
def test_sweep_every_request_after_compaction_is_well_formed(keep):
    """Random conversations through the Agent, compacting often: every request the model
    receives (summary requests included) is one the API accepts."""
    import random

    rng = random.Random(keep)
    counter = [0]

    def model(request):
        if is_summary(request):
            return reply("SUMMARY", usage=SUMMARY_USAGE)
        counter[0] += 1
        n = counter[0]
        usage = BIG if rng.random() < 0.4 else SMALL
        if rng.random() < 0.6:
            calls = [tool_use("echo", {}, f"t{n}_{j}") for j in range(rng.randint(1, 3))]
            return reply(*(["thinking aloud"] if rng.random() < 0.5 else []), *calls, usage=usage)
        return reply(f"answer {n}", usage=usage)

    client = FunctionModelClient(model)
    agent = Agent(model="m", model_client=client, tools=[echo], max_turns=50,
                  auto_compact=AutoCompact(threshold_tokens=500, keep_recent_messages=keep))
    for _ in range(12):
        agent.prompt("next step")
    compactions = sum(1 for r in client.requests if is_summary(r))
    assert compactions > 0
    for request in client.requests:
        assert_well_formed(request.messages, strict_roles=True)
    assert_well_formed(agent.get_history(), strict_roles=True)
