"""``history_problems`` / ``assert_well_formed`` (lattice/testing/invariants.py): a paused
conversation is well-formed; ``strict=True`` flags it (SPEC 16a)."""

from __future__ import annotations

import pytest
from helpers import reply, tool_use

from lattice import Agent, Tool
from lattice.testing import ScriptedModelClient, assert_well_formed, history_problems


def paused_history():
    def delete(args):
        return "deleted"

    tool = Tool("delete", "Delete.", {"type": "object"}, delete, requires_approval=True)
    client = ScriptedModelClient([reply("Deleting.", tool_use("delete", id="t1"),
                                        tool_use("delete", id="t2"))])
    agent = Agent(model="m", model_client=client, tools=[tool])
    assert agent.prompt("clean up").subtype == "awaiting_approval"
    return agent.get_history()


def test_a_conversation_paused_for_approval_is_well_formed():
    history = paused_history()
    assert history[-1]["pending_approval"] is True
    assert history_problems(history) == []
    assert_well_formed(history)


def test_strict_flags_the_unanswered_calls_of_a_paused_conversation():
    history = paused_history()
    problems = history_problems(history, strict=True)
    assert problems == ["message 1: tool_use 't1' has no tool_result in the next message",
                        "message 1: tool_use 't2' has no tool_result in the next message"]
    with pytest.raises(AssertionError, match="t1"):
        assert_well_formed(history, strict=True)


def test_only_a_marked_last_reply_may_wait():
    unmarked = paused_history()
    del unmarked[-1]["pending_approval"]
    assert len(history_problems(unmarked)) == 2
    # A marker that stayed on a reply whose calls were answered later (an append-only
    # store keeps it) excuses nothing: that reply is checked like any other.
    marked_early = [*paused_history(), {"role": "user", "content": "moved on"}]
    assert len(history_problems(marked_early)) == 2
