"""Compaction policy and history surgery (``lattice.compaction.rules``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict

import pytest
from helpers import call, calls, results, text_reply, thinking, user

from lattice.compaction.rules import (
    DEFAULT_COMPACTION_PROMPT,
    AutoCompact,
    find_cut,
    prompt_size,
    rebuild,
    resolve_auto_compact,
    should_compact,
    summary_messages,
    summary_text,
    wrap_summary,
)
from lattice.testing.invariants import assert_well_formed

# --- settings -----------------------------------------------------------------------


def test_defaults() -> None:
    settings = AutoCompact()
    assert (settings.threshold_tokens, settings.keep_recent_messages, settings.prompt) == (
        100_000, 6, None)
    assert settings.effective_prompt == DEFAULT_COMPACTION_PROMPT
    assert AutoCompact(prompt="Summarise.").effective_prompt == "Summarise."


@pytest.mark.parametrize("kwargs, needle", [
    ({"threshold_tokens": 0}, "auto_compact.threshold_tokens must be a positive int, got 0"),
    ({"threshold_tokens": -5}, "auto_compact.threshold_tokens must be a positive int, got -5"),
    ({"threshold_tokens": True}, "auto_compact.threshold_tokens must be a positive int, got True"),
    ({"threshold_tokens": 1.5}, "auto_compact.threshold_tokens must be a positive int, got 1.5"),
    ({"threshold_tokens": "100"}, "auto_compact.threshold_tokens"),
    ({"keep_recent_messages": -1}, "auto_compact.keep_recent_messages must be a non-negative "
                                   "int, got -1"),
    ({"keep_recent_messages": False}, "auto_compact.keep_recent_messages must be a "
                                      "non-negative int, got False"),
    ({"keep_recent_messages": 2.0}, "auto_compact.keep_recent_messages"),
    ({"prompt": ""}, "auto_compact.prompt must be a non-empty str or None, got ''"),
    ({"prompt": "  \n"}, "auto_compact.prompt"),
    ({"prompt": 42}, "auto_compact.prompt must be a non-empty str or None, got 42"),
])
def test_invalid_settings_name_field_and_value(kwargs: Dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError) as caught:
        AutoCompact(**kwargs)
    assert needle in str(caught.value)


def test_valid_edge_settings() -> None:
    assert AutoCompact(threshold_tokens=1, keep_recent_messages=0).keep_recent_messages == 0


def test_settings_are_frozen() -> None:
    with pytest.raises(AttributeError):
        AutoCompact().threshold_tokens = 5  # type: ignore[misc]


def test_resolve_auto_compact() -> None:
    assert resolve_auto_compact(False) is None
    assert resolve_auto_compact(None) is None
    assert resolve_auto_compact(True) == AutoCompact()
    mine = AutoCompact(threshold_tokens=10)
    assert resolve_auto_compact(mine) is mine
    assert resolve_auto_compact({"threshold_tokens": 150_000, "keep_recent_messages": 8}) == (
        AutoCompact(threshold_tokens=150_000, keep_recent_messages=8))
    assert resolve_auto_compact({}) == AutoCompact()


def test_resolve_dict_with_unknown_keys_names_them() -> None:
    with pytest.raises(ValueError) as caught:
        resolve_auto_compact({"threshold_tokens": 5, "thresholdTokens": 5, "keep": 1})
    message = str(caught.value)
    assert "auto_compact" in message and "'thresholdTokens'" in message and "'keep'" in message
    assert "'threshold_tokens'" not in message.split("(known")[0]


def test_resolve_dict_with_bad_value_uses_field_validation() -> None:
    with pytest.raises(ValueError, match="auto_compact.threshold_tokens"):
        resolve_auto_compact({"threshold_tokens": 0})


@pytest.mark.parametrize("value", [1, 0, "yes", 100_000, [("threshold_tokens", 5)], object()])
def test_resolve_rejects_other_values(value: Any) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_auto_compact(value)
    assert "auto_compact" in str(caught.value) and repr(value) in str(caught.value)


# --- the trigger --------------------------------------------------------------------


def test_prompt_size_from_dicts() -> None:
    full = {"input_tokens": 10, "output_tokens": 999, "cache_creation_input_tokens": 20,
            "cache_read_input_tokens": 30}
    assert prompt_size(full) == 60
    assert prompt_size({"input_tokens": 7}) == 7
    assert prompt_size({"input_tokens": 7, "cache_read_input_tokens": None}) == 7
    assert prompt_size({"cache_read_input_tokens": 5}) == 5
    assert prompt_size({}) == 0
    assert prompt_size(None) == 0


def test_prompt_size_from_objects() -> None:
    assert prompt_size(SimpleNamespace(input_tokens=1, cache_creation_input_tokens=2,
                                       cache_read_input_tokens=3, output_tokens=4)) == 6
    assert prompt_size(SimpleNamespace(input_tokens=4, cache_read_input_tokens=None)) == 4


def test_should_compact_needs_settings_and_strictly_more_than_threshold() -> None:
    settings = AutoCompact(threshold_tokens=100)
    assert not should_compact(None, {"input_tokens": 10**6})
    assert not should_compact(settings, {"input_tokens": 100})
    assert should_compact(settings, {"input_tokens": 60, "cache_read_input_tokens": 41})
    assert not should_compact(settings, None)  # a client without usage never compacts
    assert not should_compact(settings, {})


# --- find_cut -----------------------------------------------------------------------


def test_cut_at_a_safe_point_stays() -> None:
    history = [user("a"), text_reply("b"), user("c"), text_reply("d"), user("e")]
    assert find_cut(history, 2) == 3  # first kept: assistant "d"
    assert find_cut(history, 1) == 4  # first kept: plain user message
    assert find_cut(history, 4) == 1


def test_cut_moves_earlier_past_tool_results() -> None:
    history = [user("go"), calls("t1"), results("t1"), calls("t2", "t3"),
               results("t2", "t3"), text_reply("done")]
    assert find_cut(history, 2) == 3  # start 4 is a tool_result message: keep its tool_use
    assert find_cut(history, 4) == 1  # start 2 likewise
    assert find_cut(history, 1) == 5


def test_summarised_part_never_ends_in_a_tool_use() -> None:
    history = [user("go"), text_reply("ok"), user("more"), calls("t1"), results("t1")]
    cut = find_cut(history, 1)
    assert cut == 3
    assert history[cut - 1]["role"] == "user" and history[cut]["role"] == "assistant"


def test_cut_skips_over_a_run_of_unsafe_messages() -> None:
    # Not a valid history (orphan tool_results), but find_cut must still only stop at a
    # message that does not hold tool_results.
    history = [user("a"), text_reply("b"), results("x"), results("y"), results("z")]
    assert find_cut(history, 1) == 1


def test_nothing_to_summarise_is_none() -> None:
    assert find_cut([], 0) is None
    assert find_cut([], 6) is None
    assert find_cut([user("a")], 1) is None
    assert find_cut([user("a"), calls("t1"), results("t1")], 3) is None
    # A replaced history may start with the assistant: the only safe cut is then 0.
    assert find_cut([calls("t1"), results("t1")], 1) is None
    # ...whereas here moving earlier still leaves the prompt to summarise.
    assert find_cut([user("a"), calls("t1"), results("t1")], 1) == 1


def test_keep_recent_larger_than_history() -> None:
    assert find_cut([user("a"), text_reply("b")], 50) is None


def test_keep_recent_zero_summarises_everything() -> None:
    history = [user("go"), calls("t1"), results("t1")]
    assert find_cut(history, 0) == 3
    assert find_cut([user("a")], 0) == 1
    assert rebuild("S", history[3:]) == [
        {"role": "user", "content": [{"type": "text", "text": wrap_summary("S")}]}]


def test_find_cut_rejects_negative_keep() -> None:
    with pytest.raises(ValueError, match="keep_recent"):
        find_cut([user("a")], -1)


def test_user_message_with_text_only_is_a_safe_start() -> None:
    history = [user("a"), text_reply("b"), user([{"type": "text", "text": "c"}])]
    assert find_cut(history, 1) == 2


# --- summary request ----------------------------------------------------------------


def test_summary_request_is_one_user_message_ending_with_the_prompt() -> None:
    history = [
        user("Please fix bug #12 in src/app.py"),
        {"role": "assistant", "content": [
            thinking("secret reasoning"),
            {"type": "text", "text": "Reading the file."},
            call("toolu_1", "read_file", path="src/app.py"),
            call("toolu_2", "run", cmd="pytest -q")]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "def main(): ..."},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "1 failed"},
                         {"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}]},
        user([{"type": "document", "source": {}}, {"type": "text", "text": "see doc"}]),
    ]
    messages = summary_messages(history, "SUMMARISE NOW")
    assert len(messages) == 1 and messages[0]["role"] == "user"
    text = messages[0]["content"]
    assert isinstance(text, str) and text.endswith("SUMMARISE NOW")
    for needle in ("User:", "Assistant:", "Please fix bug #12 in src/app.py",
                   "Reading the file.", "read_file", '{"path": "src/app.py"}', "toolu_1",
                   '{"cmd": "pytest -q"}', "def main(): ...", "tool error", "1 failed",
                   "[image]", "[document]", "see doc"):
        assert needle in text, needle
    assert "secret reasoning" not in text and "sig==" not in text and "AAAA" not in text
    assert_well_formed(messages, strict_roles=True)


def test_summary_request_clips_large_tool_input_and_result() -> None:
    big = "x" * 20_000
    history = [user("go"), {"role": "assistant", "content": [call("t1", "write", body=big)]},
               results("t1", content="HEAD" + "y" * 50_000 + "TAIL")]
    text = summary_messages(history, DEFAULT_COMPACTION_PROMPT)[0]["content"]
    assert len(text) < 15_000
    assert "characters omitted" in text
    assert "HEAD" in text and "TAIL" in text


def test_summary_request_renders_odd_shapes() -> None:
    history = [user("a"), user("b"),  # consecutive user prompts
               {"role": "assistant", "content": []},
               {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "z"},
                                                 {"type": "mystery"}]},
               results("t9", content=None)]
    messages = summary_messages(history, "P")
    text = messages[0]["content"]
    assert "[mystery]" in text and "(no text)" in text and "t9" in text
    assert_well_formed(messages, strict_roles=True)


def test_summary_request_needs_something_to_summarise() -> None:
    with pytest.raises(ValueError):
        summary_messages([], "P")


def test_default_prompt_covers_what_matters() -> None:
    lowered = DEFAULT_COMPACTION_PROMPT.lower()
    for topic in ("goal", "decision", "next step", "file", "path", "identifier", "url",
                  "command", "number", "error", "preference", "constraint", "tool",
                  "preamble"):
        assert topic in lowered, topic


def test_summary_text() -> None:
    reply = {"role": "assistant", "content": [
        thinking(), {"type": "text", "text": "Part one. "}, {"type": "text", "text": "Two.\n"}]}
    assert summary_text(reply) == "Part one. Two."
    assert summary_text({"role": "assistant", "content": " plain "}) == "plain"


@pytest.mark.parametrize("content", [[], [thinking()], [{"type": "text", "text": "  \n"}], "",
                                     None])
def test_summary_text_empty_raises(content: Any) -> None:
    with pytest.raises(ValueError, match="compaction summary was empty"):
        summary_text({"role": "assistant", "content": content})






