"""Compaction's history surgery (``lattice.compaction.rules``): rebuilding the history around a
summary, and a sweep over random conversations checking the cut and the rebuilt history.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any, Dict, List, Optional

import pytest
from helpers import Msg, call, calls, results, text_reply, thinking, user

from lattice.compaction.rules import (
    DEFAULT_COMPACTION_PROMPT,
    find_cut,
    rebuild,
    summary_messages,
    wrap_summary,
)
from lattice.testing.invariants import assert_well_formed, history_problems


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
