"""Compaction policy and history surgery (``lattice.compaction``)."""

from __future__ import annotations

import copy
import json
import random
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from lattice.compaction import (
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
from lattice.testing.invariants import assert_well_formed, history_problems

Msg = Dict[str, Any]


# --- builders -----------------------------------------------------------------------


def user(content: Any) -> Msg:
    return {"role": "user", "content": content}


def text_reply(text: str, **extra: Any) -> Msg:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], **extra}


def call(tool_id: str, name: str = "read", **input: Any) -> Dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": input}


def calls(*ids: str) -> Msg:
    return {"role": "assistant", "content": [call(i) for i in ids]}


def results(*ids: str, content: Any = "ok") -> Msg:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": i, "content": content} for i in ids]}


def thinking(text: str = "hmm") -> Dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": "sig=="}


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


# --- rebuild ------------------------------------------------------------------------


def summary_block(summary: str = "S") -> Dict[str, Any]:
    return {"type": "text", "text": wrap_summary(summary)}


def test_wrap_summary_says_what_happened() -> None:
    wrapped = wrap_summary("the facts")
    assert "<conversation-summary>\nthe facts\n</conversation-summary>" in wrapped
    assert "compacted" in wrapped and "Continue" in wrapped


def test_rebuild_first_kept_user_str() -> None:
    kept = [user("next question"), text_reply("answer")]
    before = copy.deepcopy(kept)
    new = rebuild("S", kept)
    assert new[0] == {"role": "user", "content": [
        summary_block(), {"type": "text", "text": "next question"}]}
    assert new[1] is kept[1]
    assert kept == before
    assert_well_formed(new, strict_roles=True)


def test_rebuild_first_kept_user_list() -> None:
    image = {"type": "image", "source": {"type": "base64", "data": "AA"}}
    kept = [user([{"type": "text", "text": "look"}, image])]
    before = copy.deepcopy(kept)
    new = rebuild("S", kept)
    assert new[0]["content"][0] == summary_block()
    assert new[0]["content"][1:] == kept[0]["content"]
    assert new[0]["content"][2] is image
    assert new[0] is not kept[0] and new[0]["content"] is not kept[0]["content"]
    assert kept == before


def test_rebuild_first_kept_user_empty_adds_no_empty_block() -> None:
    assert rebuild("S", [user("")])[0]["content"] == [summary_block()]


def test_rebuild_first_kept_assistant_keeps_metadata_and_thinking() -> None:
    think = thinking("deep")
    first = {"role": "assistant", "content": [think, call("t1")], "model": "m-1",
             "provider_response_id": "msg_1", "stop_reason": "tool_use",
             "usage": {"input_tokens": 3}}
    kept = [first, results("t1"), text_reply("done", model="m-1")]
    before = copy.deepcopy(kept)
    new = rebuild("S", kept)
    assert new[0] == {"role": "user", "content": [summary_block()]}
    assert new[1] is first and new[1]["content"][0] is think
    assert new[1]["model"] == "m-1" and new[1]["provider_response_id"] == "msg_1"
    assert new[2:] == kept[1:]
    assert kept == before
    assert_well_formed(new, strict_roles=True)


def test_rebuild_keeps_thinking_in_a_merged_user_message_too() -> None:
    think = thinking()
    kept = [user("q"), {"role": "assistant", "content": [think, {"type": "text", "text": "a"}]}]
    assert rebuild("S", kept)[1]["content"][0] is think


def test_rebuild_refuses_a_leading_tool_result() -> None:
    with pytest.raises(ValueError, match="find_cut"):
        rebuild("S", [results("t1")])


def test_rebuild_does_not_mutate_full_history() -> None:
    history = [user("a"), calls("t1"), results("t1"), text_reply("b"), user("c")]
    snapshot = copy.deepcopy(history)
    cut = find_cut(history, 1)
    assert cut == 4
    summary_messages(history[:cut], DEFAULT_COMPACTION_PROMPT)
    rebuild("S", history[cut:])
    assert history == snapshot


# --- sweep over random conversations ------------------------------------------------


class _Conversation:
    """Random but realistic histories, as the loop would have written them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.messages: List[Msg] = []
        self.ids = 0

    def prompt(self) -> None:
        if self.rng.random() < 0.3:
            self.messages.append(user([{"type": "text", "text": "look"},
                                       {"type": "image", "source": {"type": "base64"}}]))
        else:
            self.messages.append(user(f"prompt {len(self.messages)}"))

    def _head(self) -> List[Dict[str, Any]]:
        head = [thinking()] if self.rng.random() < 0.4 else []
        if self.rng.random() < 0.5:
            head.append({"type": "text", "text": "let me check"})
        return head

    def batch(self) -> None:
        ids = []
        for _ in range(self.rng.randint(1, 3)):
            self.ids += 1
            ids.append(f"toolu_{self.ids}")
        self.messages.append({"role": "assistant", "model": "m",
                              "content": self._head() + [call(i) for i in ids]})
        self.messages.append(results(*ids))

    def reply(self) -> None:
        self.messages.append({"role": "assistant", "provider_response_id": "msg",
                              "content": self._head() + [{"type": "text", "text": "done"}]})

    def query(self) -> None:
        self.prompt()
        for _ in range(self.rng.choice([0, 0, 1, 1, 2, 3])):
            self.batch()
        # Sometimes the query was aborted before its final reply, so the next prompt
        # follows a user message.
        if self.rng.random() < 0.8:
            self.reply()


def _random_history(rng: random.Random) -> List[Msg]:
    conversation = _Conversation(rng)
    for _ in range(rng.randint(1, 6)):
        conversation.query()
    return conversation.messages


def _expected_cut(history: List[Msg], keep: int) -> Optional[int]:
    """Brute force: the latest index <= the starting cut whose message is safe to keep first."""
    start = max(len(history) - keep, 0)
    for i in range(start, 0, -1):
        if i == len(history) or not any(
                b.get("type") == "tool_result" for b in history[i]["content"]
                if history[i]["role"] == "user" and isinstance(b, dict)):
            return i
    return None


def test_sweep_random_conversations() -> None:
    rng = random.Random(8)
    cuts = 0
    for _ in range(300):
        history = _random_history(rng)
        assert_well_formed(history)
        alternates = not history_problems(history, strict_roles=True)
        snapshot = copy.deepcopy(history)
        for keep in range(13):
            cut = find_cut(history, keep)
            assert cut == _expected_cut(history, keep)
            if cut is None:
                continue
            cuts += 1
            assert 0 < cut <= len(history)
            request = summary_messages(history[:cut], DEFAULT_COMPACTION_PROMPT)
            assert len(request) == 1
            assert_well_formed(request, strict_roles=True)
            json.dumps(request)

            kept = history[cut:]
            new = rebuild("summary", kept)
            assert_well_formed(new)
            if alternates:
                assert_well_formed(new, strict_roles=True)
            assert new[0]["role"] == "user"
            assert new[0]["content"][0] == summary_block("summary")
            # The kept messages are a suffix of the original, untouched.
            if kept and kept[0]["role"] == "user":
                original = kept[0]["content"]
                if isinstance(original, str):
                    original = [{"type": "text", "text": original}]
                assert new[0]["content"][1:] == original
                assert all(a is b for a, b in zip(new[1:], kept[1:]))
                assert len(new) == len(kept)
            else:
                assert all(a is b for a, b in zip(new[1:], kept))
                assert len(new) == len(kept) + 1
            json.dumps(new)
        assert history == snapshot
    assert cuts > 1000  # the sweep really exercised rebuild
