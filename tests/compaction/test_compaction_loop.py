"""SPEC section 9 through the loop: threshold compaction and overflow recovery."""
import json
import logging

import pytest
from helpers import BIG as BIG_SPEC
from helpers import COMPACT_MARK as MARK
from helpers import LOOP_BIG as BIG
from helpers import LOOP_SMALL as SMALL
from helpers import LOOP_SUMMARY_USAGE as SUMMARY_USAGE
from helpers import MODEL, SUMMARY, reply, results_of, run, text_of, tool_use
from helpers import SMALL as SMALL_SPEC
from helpers import SUMMARY_USAGE as SUMMARY_USAGE_SPEC
from helpers import LoopModel as Model
from helpers import SummaryModel as SpecModel
from helpers import compact_agent as make
from helpers import loop_agent as agent_for
from helpers import loop_is_summary as is_summary
from helpers import loop_turn as turn

from lattice import (
    DEFAULT_COMPACTION_PROMPT,
    Agent,
    APIConnectionError,
    AutoCompact,
    MemoryHistoryStore,
    SystemMessage,
    Tool,
    Usage,
)
from lattice.testing import FunctionModelClient, assert_well_formed

echo = Tool("echo", "Echo.", {"type": "object"}, lambda a: "echoed")


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


# -- SPEC 9 threshold compaction, between queries --------------------------------------------


def assert_sendable(history):
    assert history[0]["role"] == "user"
    roles = [m["role"] for m in history]
    assert all(a != b for a, b in zip(roles, roles[1:])), roles
    assert_well_formed(history)


def test_threshold_compaction_before_the_next_query():
    model = SpecModel(reply("r1", usage=BIG_SPEC), reply("r2", usage=SMALL_SPEC))
    agent, replaced = make(model)
    assert run(agent, "q1")[-1].subtype == "success"
    assert model.summaries == []
    messages = run(agent, "q2")
    assert [m.type for m in messages] == ["system", "assistant", "result"]
    system, _, result = messages
    assert isinstance(system, SystemMessage)
    assert system.subtype == "compaction" and system.compacted_messages == 1
    assert system.usage == Usage(**SUMMARY_USAGE_SPEC)
    assert result.usage == Usage(7 + 5, 3 + 1)
    assert result.num_turns == 1
    assert len(model.summaries) == 1
    assert "q1" in json.dumps(model.summaries[0].messages)
    history = agent.get_history()
    assert history[0]["role"] == "user"
    wrapped = text_of(history[0]["content"])
    assert SUMMARY in wrapped and len(wrapped) > len(SUMMARY)
    assert history[1]["content"] == [{"type": "text", "text": "r1"}]
    assert history[2] == {"role": "user", "content": "q2"}
    assert replaced[0] == history[:3]
    assert_sendable(history)
    assert model.normal[1].messages == [{"role": m["role"], "content": m["content"]}
                                        for m in history[:3]]


def test_first_kept_user_message_gets_the_summary_prepended():
    model = SpecModel(reply("r1", usage=BIG_SPEC), reply("r2", usage=SMALL_SPEC))
    agent, _ = make(model, keep_recent_messages=1)
    agent.prompt("q1")
    messages = run(agent, "q2")
    assert messages[0].compacted_messages == 2
    first = model.normal[1].messages[0]
    assert first["role"] == "user" and isinstance(first["content"], list)
    assert SUMMARY in first["content"][0]["text"]
    assert text_of(first["content"]).endswith("q2")
    assert len(model.normal[1].messages) == 1
    assert_sendable(agent.get_history())


def test_cut_never_separates_tool_result_from_tool_use():
    model = SpecModel(reply(tool_use("t", {}, "c1"), usage=SMALL_SPEC), reply("r1", usage=BIG_SPEC),
                  reply("r2", usage=SMALL_SPEC))
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model),
                  tools=[Tool("t", "T.", {"type": "object"}, lambda i: "result")],
                  auto_compact={"threshold_tokens": 100, "keep_recent_messages": 3,
                                "prompt": MARK})
    agent.prompt("q1")  # [u, a(tool_use), u(tool_result), a]
    messages = run(agent, "q2")  # keep 3 would start at the tool_result: moves earlier
    assert messages[0].type == "system" and messages[0].compacted_messages == 1
    history = agent.get_history()
    assert_sendable(history)
    assert [b["id"] for b in history[1]["content"] if b["type"] == "tool_use"] == ["c1"]
    assert results_of(history[2])[0]["tool_use_id"] == "c1"


def test_compaction_between_turns_of_one_query():
    model = SpecModel(reply(tool_use("t", {}, "c1"), usage=BIG_SPEC), reply("done", usage=SMALL_SPEC))
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model),
                  tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")],
                  auto_compact={"threshold_tokens": 100, "keep_recent_messages": 2,
                                "prompt": MARK})
    messages = run(agent, "q")
    assert [m.type for m in messages] == ["assistant", "user", "system", "assistant", "result"]
    assert messages[-1].num_turns == 2
    assert messages[-1].usage == Usage(500 + 5 + 7, 1 + 1 + 3)


def test_no_safe_cut_or_nothing_to_summarise_skips():
    model = SpecModel(reply("r1", usage=BIG_SPEC), reply("r2", usage=BIG_SPEC))
    agent, _ = make(model, keep_recent_messages=6)
    agent.prompt("q1")
    assert [m.type for m in run(agent, "q2")] == ["assistant", "result"]
    assert model.summaries == []


def test_default_prompt_and_defaults():
    ac = AutoCompact()
    assert (ac.threshold_tokens, ac.keep_recent_messages, ac.prompt) == (100_000, 6, None)
    assert isinstance(DEFAULT_COMPACTION_PROMPT, str) and DEFAULT_COMPACTION_PROMPT.strip()
    huge = {"input_tokens": 200_000, "output_tokens": 1}
    model = SpecModel(reply(tool_use("t", {}, "a")), reply(tool_use("t", {}, "b")), reply("r", usage=huge),
                  reply("r2"), marker=DEFAULT_COMPACTION_PROMPT[:60])
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model), auto_compact=True,
                  tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    agent.prompt("q1")
    messages = run(agent, "q2")
    assert messages[0].type == "system" and len(model.summaries) == 1


def test_prompt_size_includes_cache_tokens_and_must_exceed_threshold():
    cached = {"input_tokens": 10, "cache_read_input_tokens": 80,
              "cache_creation_input_tokens": 20}
    model = SpecModel(reply("r1", usage=cached), reply("r2"))
    agent, _ = make(model)
    agent.prompt("q1")
    assert run(agent, "q2")[0].type == "system"

    exact = {"input_tokens": 100}
    model = SpecModel(reply("r1", usage=exact), reply("r2"))
    agent, _ = make(model)
    agent.prompt("q1")
    assert run(agent, "q2")[0].type == "assistant"


def test_client_without_usage_never_compacts():
    model = SpecModel(*[{"role": "assistant", "content": [{"type": "text", "text": "x" * 50}]}] * 4)
    agent, _ = make(model, threshold_tokens=1, keep_recent_messages=1)
    for i in range(4):
        assert [m.type for m in run(agent, f"q{i}")] == ["assistant", "result"]
    assert model.summaries == []


def test_failed_threshold_compaction_before_a_query_is_logged_and_skipped(caplog):
    model = SpecModel(reply("r1", usage=BIG_SPEC), reply("r2"), summary=APIConnectionError("down"))
    agent, _ = make(model)
    agent.prompt("q1")
    with caplog.at_level(logging.DEBUG, logger="lattice"):
        messages = run(agent, "q2")
    assert [m.type for m in messages] == ["assistant", "result"]
    assert messages[-1].result == "r2"
    assert any(r.name.startswith("lattice") for r in caplog.records)
