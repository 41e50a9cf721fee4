"""SPEC conformance: automatic compaction and overflow recovery (section 9)."""

import json
import logging

import pytest
from helpers import MODEL, assert_well_formed, reply, results_of, run, text_of, tool_use

from lattice import (
    DEFAULT_COMPACTION_PROMPT,
    Agent,
    APIConnectionError,
    AutoCompact,
    PromptTooLongError,
    SystemMessage,
    Tool,
    Usage,
    define_history_store,
)
from lattice.testing import FunctionModelClient

MARK = "SUMMARISE-THE-TRANSCRIPT-MARKER"
SUMMARY = "SUMMARY-TEXT-42"
SUMMARY_USAGE = {"input_tokens": 7, "output_tokens": 3}
BIG = {"input_tokens": 500, "output_tokens": 1}
SMALL = {"input_tokens": 5, "output_tokens": 1}


def is_summary(request, marker=MARK):
    last = request.messages[-1] if request.messages else {}
    return marker in json.dumps(request.system) or marker in json.dumps(last)


class Model:
    """Normal replies from a script; summary requests answered with SUMMARY."""

    def __init__(self, *replies, summary=None, marker=MARK):
        self.replies = list(replies)
        self.summary = summary
        self.marker = marker
        self.normal, self.summaries = [], []

    def __call__(self, request):
        if is_summary(request, self.marker):
            self.summaries.append(request)
            if isinstance(self.summary, BaseException):
                raise self.summary
            return reply(SUMMARY, usage=SUMMARY_USAGE)
        self.normal.append(request)
        item = self.replies.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def assert_sendable(history):
    assert history[0]["role"] == "user"
    roles = [m["role"] for m in history]
    assert all(a != b for a, b in zip(roles, roles[1:])), roles
    assert_well_formed(history)


def make(model, store=None, **compact):
    settings = {"threshold_tokens": 100, "keep_recent_messages": 2, "prompt": MARK}
    settings.update(compact)
    replaced = []
    if store is None:
        store = define_history_store(replace=lambda m: replaced.append(json.loads(json.dumps(m))))
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model),
                  auto_compact=AutoCompact(**settings), history_store=store)
    return agent, replaced


def test_threshold_compaction_before_the_next_query():
    model = Model(reply("r1", usage=BIG), reply("r2", usage=SMALL))
    agent, replaced = make(model)
    assert run(agent, "q1")[-1].subtype == "success"
    assert model.summaries == []
    messages = run(agent, "q2")
    assert [m.type for m in messages] == ["system", "assistant", "result"]
    system, _, result = messages
    assert isinstance(system, SystemMessage)
    assert system.subtype == "compaction" and system.compacted_messages == 1
    assert system.usage == Usage(**SUMMARY_USAGE)
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
    model = Model(reply("r1", usage=BIG), reply("r2", usage=SMALL))
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
    model = Model(reply(tool_use("t", {}, "c1"), usage=SMALL), reply("r1", usage=BIG),
                  reply("r2", usage=SMALL))
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
    model = Model(reply(tool_use("t", {}, "c1"), usage=BIG), reply("done", usage=SMALL))
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model),
                  tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")],
                  auto_compact={"threshold_tokens": 100, "keep_recent_messages": 2,
                                "prompt": MARK})
    messages = run(agent, "q")
    assert [m.type for m in messages] == ["assistant", "user", "system", "assistant", "result"]
    assert messages[-1].num_turns == 2
    assert messages[-1].usage == Usage(500 + 5 + 7, 1 + 1 + 3)


def test_no_safe_cut_or_nothing_to_summarise_skips():
    model = Model(reply("r1", usage=BIG), reply("r2", usage=BIG))
    agent, _ = make(model, keep_recent_messages=6)
    agent.prompt("q1")
    assert [m.type for m in run(agent, "q2")] == ["assistant", "result"]
    assert model.summaries == []


def test_default_prompt_and_defaults():
    ac = AutoCompact()
    assert (ac.threshold_tokens, ac.keep_recent_messages, ac.prompt) == (100_000, 6, None)
    assert isinstance(DEFAULT_COMPACTION_PROMPT, str) and DEFAULT_COMPACTION_PROMPT.strip()
    huge = {"input_tokens": 200_000, "output_tokens": 1}
    model = Model(reply(tool_use("t", {}, "a")), reply(tool_use("t", {}, "b")), reply("r", usage=huge),
                  reply("r2"), marker=DEFAULT_COMPACTION_PROMPT[:60])
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model), auto_compact=True,
                  tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    agent.prompt("q1")
    messages = run(agent, "q2")
    assert messages[0].type == "system" and len(model.summaries) == 1


def test_prompt_size_includes_cache_tokens_and_must_exceed_threshold():
    cached = {"input_tokens": 10, "cache_read_input_tokens": 80,
              "cache_creation_input_tokens": 20}
    model = Model(reply("r1", usage=cached), reply("r2"))
    agent, _ = make(model)
    agent.prompt("q1")
    assert run(agent, "q2")[0].type == "system"

    exact = {"input_tokens": 100}
    model = Model(reply("r1", usage=exact), reply("r2"))
    agent, _ = make(model)
    agent.prompt("q1")
    assert run(agent, "q2")[0].type == "assistant"


def test_client_without_usage_never_compacts():
    model = Model(*[{"role": "assistant", "content": [{"type": "text", "text": "x" * 50}]}] * 4)
    agent, _ = make(model, threshold_tokens=1, keep_recent_messages=1)
    for i in range(4):
        assert [m.type for m in run(agent, f"q{i}")] == ["assistant", "result"]
    assert model.summaries == []


def test_failed_threshold_compaction_is_logged_and_skipped(caplog):
    model = Model(reply("r1", usage=BIG), reply("r2"), summary=APIConnectionError("down"))
    agent, _ = make(model)
    agent.prompt("q1")
    with caplog.at_level(logging.DEBUG, logger="lattice"):
        messages = run(agent, "q2")
    assert [m.type for m in messages] == ["assistant", "result"]
    assert messages[-1].result == "r2"
    assert any(r.name.startswith("lattice") for r in caplog.records)


# -- overflow recovery ---------------------------------------------------------------------------

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


def test_max_tokens_never_compacts():
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
