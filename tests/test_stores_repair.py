"""repair_history: what to append so a resumed transcript ends well-formed."""

import copy

from lattice.stores import repair_history
from lattice.stores.repair import UNFINISHED_CALL_TEXT


def use(id, name="t"):
    return {"type": "tool_use", "id": id, "name": name, "input": {}}


def result(id):
    return {"type": "tool_result", "tool_use_id": id, "content": "ok"}


def unfinished(*ids):
    return [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": i, "content": UNFINISHED_CALL_TEXT,
         "is_error": True} for i in ids]}]


def test_nothing_to_repair():
    assert repair_history([]) == []
    assert repair_history([{"role": "user", "content": "hi"}]) == []
    assert repair_history([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]) == []
    assert repair_history([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]) == []


def test_answered_calls_need_nothing():
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use("a"), use("b")]},
        {"role": "user", "content": [result("a"), result("b")]},
    ]
    assert repair_history(history) == []


def test_unanswered_calls_get_error_results_in_order():
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "calling"}, use("b"), use("a"), use("c")]},
    ]
    before = copy.deepcopy(history)
    assert repair_history(history) == unfinished("b", "a", "c")
    assert history == before  # the input is not modified
    assert UNFINISHED_CALL_TEXT == (
        "The call did not complete: the previous session ended before its result was recorded.")


def test_repair_after_earlier_complete_turns():
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use("a")]},
        {"role": "user", "content": [result("a")]},
        {"role": "assistant", "content": [use("b")]},
    ]
    assert repair_history(history) == unfinished("b")


def test_appending_the_repair_makes_it_well_formed():
    history = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use("x")]}]
    fixed = history + repair_history(history)
    assert repair_history(fixed) == []
    assert fixed[-1]["content"][0]["tool_use_id"] == "x"


def test_partly_answered_last_user_message_is_left_alone():
    # Documented: lattice never writes a torn batch; the host fixes hand-edited ones.
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use("a"), use("b")]},
        {"role": "user", "content": [result("a")]},
    ]
    assert repair_history(history) == []


def test_odd_blocks_are_tolerated():
    history = [{"role": "assistant", "content": [
        use("a"), use("a"),  # a duplicate id is answered once
        {"type": "tool_use", "name": "no_id"},  # nothing to answer it with
        "not a block",
    ]}]
    assert repair_history(history) == unfinished("a")
    assert repair_history(["not a dict"]) == []
