"""repair_history: any stored transcript becomes one the API accepts, keeping what it can."""

import copy
import random

import pytest
from helpers import reply, tool_use

from lattice.stores import repair_history
from lattice.stores.repair import LOST_START_TEXT
from lattice.testing import assert_well_formed, history_problems
from lattice.tools.calls import NOT_RUN

UNFINISHED_CALL_TEXT = NOT_RUN["unfinished"]


def results(*ids, text="ok"):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i,
                                         "content": text} for i in ids]}


def user(text="hi"):
    return {"role": "user", "content": text}


def test_nothing_to_repair_is_returned_as_is():
    history = [user(), reply("a", tool_use("t", id="1")), results("1"), reply("done")]
    fixed, changed = repair_history(history)
    assert fixed == history and not changed
    assert all(a is b for a, b in zip(fixed, history))  # shared, not copied


def test_unanswered_tail_gets_error_results_in_order():
    history = [user(), reply(tool_use("a", id="1"), tool_use("b", id="2"))]
    before = copy.deepcopy(history)
    fixed, changed = repair_history(history)
    assert changed and history == before  # the input is never modified
    assert [b["tool_use_id"] for b in fixed[-1]["content"]] == ["1", "2"]
    assert all(b["is_error"] and b["content"] == UNFINISHED_CALL_TEXT
               for b in fixed[-1]["content"])
    assert_well_formed(fixed)


def test_partly_answered_batch_gets_the_missing_results_first():
    history = [user(), reply(tool_use("a", id="1"), tool_use("b", id="2")),
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "2",
                                             "content": "two"},
                                            {"type": "text", "text": "and more"}]}]
    fixed, changed = repair_history(history)
    assert changed
    blocks = fixed[2]["content"]
    assert [b.get("tool_use_id") for b in blocks] == ["1", "2", None]
    assert blocks[1]["content"] == "two" and blocks[2]["text"] == "and more"
    assert_well_formed(fixed)


def test_orphan_and_duplicate_results_are_dropped():
    history = [user(), reply(tool_use("a", id="1")),
               results("1", "1", "ghost"), user("next"), results("zombie")]
    fixed, changed = repair_history(history)
    assert changed
    assert [b["tool_use_id"] for b in fixed[2]["content"]] == ["1"]
    assert fixed[-1] == user("next")  # the message holding only an orphan is gone
    assert_well_formed(fixed)


def test_a_first_message_from_the_assistant_gets_a_user_message_before_it():
    fixed, changed = repair_history([reply("hello"), user()])
    assert changed and fixed[0] == {"role": "user", "content": LOST_START_TEXT}
    assert_well_formed(fixed)


def test_a_reply_after_an_unanswered_reply_gets_the_results_between():
    history = [user(), reply(tool_use("a", id="1")), reply("interleaved"), user("x")]
    fixed, _ = repair_history(history)
    assert fixed[2]["content"][0]["tool_use_id"] == "1"
    assert_well_formed(fixed)


def test_a_pending_approval_tail_is_left_alone():
    pending = {**reply(tool_use("a", id="1")), "pending_approval": True}
    history = [user(), pending]
    fixed, changed = repair_history(history)
    assert fixed == history and not changed


def test_odd_entries_are_dropped():
    fixed, changed = repair_history([user(), "junk", {"role": "robot", "content": "x"},
                                     reply("ok")])
    assert changed and [m["role"] for m in fixed] == ["user", "assistant"]


@pytest.mark.parametrize("seed", range(40))
def test_random_interleavings_of_two_writers_become_sendable(seed):
    """What two processes writing one conversation at once leave behind (issue 13 #5)."""
    rng = random.Random(seed)

    def conversation(tag):
        out = []
        for n in range(rng.randint(1, 5)):
            out.append(user(f"{tag}{n}"))
            for k in range(rng.randint(0, 2)):
                use_id = f"{tag}{n}-{k}"
                out += [reply(tool_use("t", id=use_id)), results(use_id)]
            out.append(reply(f"answer {tag}{n}"))
        return out

    a, b = conversation("a"), conversation("b")
    mixed = []
    while a or b:
        source = a if (a and (not b or rng.random() < 0.5)) else b
        mixed.append(source.pop(0))
    fixed, _ = repair_history(mixed)
    assert history_problems(fixed) == []
