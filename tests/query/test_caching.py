"""``mark_cache_breakpoints``: where the marks go, how many, and that nothing shared changes;
and prompt caching through an Agent against the mock server."""

from __future__ import annotations

import copy
import itertools
from typing import Any, Dict, List, Optional

import pytest
from helpers import echo_tool, reply, tool_use

from lattice import Agent, AnthropicClient
from lattice.models.base import ModelRequest
from lattice.query.caching import (
    MAX_BREAKPOINTS,
    MarkLedger,
    count_cache_breakpoints,
    mark_cache_breakpoints,
)
from lattice.testing import MockMessagesServer

MARK = {"type": "ephemeral"}
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}}
TOOLS = [
    {"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}},
    {"name": "write", "description": "Write a file.", "input_schema": {"type": "object"}},
]


def tool_turn(n: int) -> List[Dict[str, Any]]:
    return [
        {"role": "assistant", "content": [
            {"type": "text", "text": f"step {n}"},
            {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"n": n}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"out {n}"}]},
    ]


HISTORIES = {
    "str prompt": [{"role": "user", "content": "Hello"}],
    "block prompt": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    "image last": [{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                IMAGE]}],
    "tool results": [{"role": "user", "content": "go"}, *tool_turn(1), *tool_turn(2)],
    "tool result with image": [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [IMAGE]}]}],
    "assistant prefill": [{"role": "user", "content": "Say hi"},
                          {"role": "assistant", "content": "Hi"}],
}
SYSTEMS: Dict[str, Any] = {
    "no system": None,
    "str system": "You are terse.",
    "list system": [{"type": "text", "text": "Rule one."}, {"type": "text", "text": "Two."}],
}
TOOLSETS = {"no tools": [], "tools": TOOLS}


def make(messages: List[Dict[str, Any]], system: Any = None,
         tools: Optional[List[Dict[str, Any]]] = None) -> ModelRequest:
    # Like the loop: a fresh list over shared message dicts, shared tool dicts.
    return ModelRequest(model="m", messages=list(messages), system=system,
                        tools=list(tools or []))


def marks(request: ModelRequest) -> List[str]:
    """Where the marks are: "tool:<name>", "system:<i>", "message:<i>:<j>"."""
    found = [f"tool:{t['name']}" for t in request.tools if t.get("cache_control")]
    if isinstance(request.system, list):
        found += [f"system:{i}" for i, b in enumerate(request.system) if b.get("cache_control")]
    for i, message in enumerate(request.messages):
        if isinstance(message["content"], list):
            found += [f"message:{i}:{j}" for j, b in enumerate(message["content"])
                      if b.get("cache_control")]
    return found


@pytest.mark.parametrize("tools", TOOLSETS, ids=str)
@pytest.mark.parametrize("system", SYSTEMS, ids=str)
@pytest.mark.parametrize("history", HISTORIES, ids=str)
def test_every_request_shape(history: str, system: str, tools: str) -> None:
    messages, sys_value, tool_list = HISTORIES[history], SYSTEMS[system], TOOLSETS[tools]
    before = copy.deepcopy((messages, sys_value, tool_list))
    request = make(messages, sys_value, tool_list)
    returned = mark_cache_breakpoints(request)
    assert returned is request

    last = len(messages) - 1
    expected = [f"message:{last}:{len(request.messages[last]['content']) - 1}"]
    if sys_value is not None:
        expected.append(f"system:{len(request.system) - 1}")
    if tool_list:
        expected.append(f"tool:{tool_list[-1]['name']}")
    assert sorted(marks(request)) == sorted(expected)
    assert count_cache_breakpoints(request) == len(expected) <= MAX_BREAKPOINTS
    for place in (request.messages[last]["content"][-1],
                  *(request.system[-1:] if sys_value else []), *request.tools[-1:]):
        assert place["cache_control"] == MARK

    # Only copies were marked: the shared history, system and tools are untouched.
    assert (messages, sys_value, tool_list) == before
    # Everything but the marks is what was asked for.
    assert [m["role"] for m in request.messages] == [m["role"] for m in messages]
    assert request.messages[:-1] == messages[:-1]
    assert all(a is b for a, b in zip(request.messages[:-1], messages[:-1]))


def test_str_contents_become_one_marked_text_block() -> None:
    request = make([{"role": "user", "content": "Hello"}], system="Be brief.")
    mark_cache_breakpoints(request)
    assert request.system == [{"type": "text", "text": "Be brief.", "cache_control": MARK}]
    assert request.messages[-1] == {"role": "user", "content": [
        {"type": "text", "text": "Hello", "cache_control": MARK}]}


def test_tool_result_ending_message_marks_the_last_result() -> None:
    messages = [{"role": "user", "content": "go"}, *tool_turn(1)]
    messages[-1]["content"].append(
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "second"})
    request = make(messages)
    mark_cache_breakpoints(request)
    assert marks(request) == ["message:2:1"]
    assert request.messages[-1]["content"][1]["tool_use_id"] == "toolu_x"
    assert "cache_control" not in request.messages[-1]["content"][0]


def test_history_untouched_over_a_growing_conversation() -> None:
    """The loop makes a request per turn over the same dicts; no mark ever leaks back."""
    history: List[Dict[str, Any]] = [{"role": "user", "content": "go"}]
    system = [{"type": "text", "text": "sys"}]
    for n in range(1, 8):
        snapshot = copy.deepcopy((history, system, TOOLS))
        request = mark_cache_breakpoints(make(history, system, TOOLS))
        assert len(marks(request)) == 3
        assert (history, system, TOOLS) == snapshot
        history.extend(tool_turn(n))
    assert "cache_control" not in repr(history) + repr(system) + repr(TOOLS)


def test_unmarkable_or_empty_places_are_skipped() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    request = make([{"role": "user", "content": "x"},
                    {"role": "assistant", "content": [{"type": "text", "text": "a"}, thinking]}],
                   system="")
    mark_cache_breakpoints(request)
    assert marks(request) == ["message:1:0"]  # not the thinking block; no empty system
    assert request.system == ""
    for content in ("", []):
        request = make([{"role": "user", "content": content}])
        mark_cache_breakpoints(request)
        assert marks(request) == [] and request.messages[0]["content"] == content
    request = make([])
    mark_cache_breakpoints(request)
    assert request.messages == []


def marked(block: Dict[str, Any]) -> Dict[str, Any]:
    return {**block, "cache_control": MARK}


@pytest.mark.parametrize("existing", range(0, 7))
def test_never_more_than_four_counting_the_callers_marks(existing: int) -> None:
    """The caller's own marks (in history blocks, tool results, system) use up the room."""
    history: List[Dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(1, 8):
        history.extend(tool_turn(n))
    owned = [(m, j) for m in range(1, len(history) - 1) for j in range(len(history[m]["content"]))]
    history = copy.deepcopy(history)
    for m, j in owned[:existing]:
        history[m]["content"][j] = marked(history[m]["content"][j])
    before = copy.deepcopy(history)
    request = mark_cache_breakpoints(make(history, "sys", TOOLS))
    kept = min(existing, MAX_BREAKPOINTS)  # SPEC 16a: never more than 4, whoever placed them
    added = count_cache_breakpoints(request) - kept
    assert added == max(0, min(3, MAX_BREAKPOINTS - existing))
    assert count_cache_breakpoints(request) == max(kept, min(existing + 3, MAX_BREAKPOINTS))
    # The last message is marked first, then the system prompt, then the tools.
    order = ["message:14:0", "system:0", "tool:write"][:added]
    assert [m for m in order if m in marks(request)] == order
    assert history == before


def test_nested_marks_in_tool_results_count() -> None:
    inner = [marked({"type": "text", "text": f"part {i}"}) for i in range(3)]
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": [
                   {"type": "tool_use", "id": "t", "name": "read", "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                             "content": inner}]}]
    request = mark_cache_breakpoints(make(history, "sys", TOOLS))
    assert count_cache_breakpoints(request) == 4
    assert marks(request) == ["message:2:0"]


def test_places_already_marked_are_not_marked_twice() -> None:
    tools = [TOOLS[0], marked(TOOLS[1])]
    system = [marked({"type": "text", "text": "sys"})]
    history = [{"role": "user", "content": [marked({"type": "text", "text": "hi"})]}]
    request = mark_cache_breakpoints(make(history, system, tools))
    assert count_cache_breakpoints(request) == 3
    assert request.tools[1] is tools[1] and request.system is system
    assert request.messages[0] is history[0]


def test_marking_twice_adds_nothing() -> None:
    request = mark_cache_breakpoints(make(HISTORIES["tool results"], "sys", TOOLS))
    snapshot = copy.deepcopy(request.messages), copy.deepcopy(request.system), request.tools
    mark_cache_breakpoints(request)
    assert (request.messages, request.system, request.tools) == snapshot
    assert count_cache_breakpoints(request) == 3


@pytest.mark.parametrize("existing", range(0, 5))
def test_any_mix_of_existing_marks_stays_within_four(existing: int) -> None:
    places = [("tool", 0), ("tool", 1), ("system", 0), ("message", 0), ("message", 1)]
    for chosen in itertools.combinations(places, existing):
        tools = [marked(t) if ("tool", i) in chosen else t for i, t in enumerate(TOOLS)]
        system = [marked({"type": "text", "text": "s"}) if ("system", 0) in chosen
                  else {"type": "text", "text": "s"}]
        blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
        content = [marked(b) if ("message", i) in chosen else b for i, b in enumerate(blocks)]
        request = mark_cache_breakpoints(make([{"role": "user", "content": content}], system,
                                              tools))
        assert existing <= count_cache_breakpoints(request) <= MAX_BREAKPOINTS, chosen


@pytest.mark.parametrize("existing", [5, 6, 9])
def test_over_four_callers_marks_the_oldest_are_dropped_on_the_copy(existing: int) -> None:
    """SPEC 16a: lattice places none of its own, then drops the caller's oldest marks (in
    request order: tools, system, messages); the history keeps what the caller wrote."""
    tools = [TOOLS[0], marked(TOOLS[1])]
    system = [marked({"type": "text", "text": "sys"})]
    history: List[Dict[str, Any]] = []
    for n in range(existing - 2):  # prompts the caller marked, one mark each
        history.append({"role": "user", "content": [marked({"type": "text", "text": f"p{n}"})]})
        history.append({"role": "assistant", "content": [{"type": "text", "text": f"a{n}"}]})
    before = copy.deepcopy((history, system, tools))
    for mark in (True, False):
        request = make(history, system, tools)
        if mark:
            mark_cache_breakpoints(request)
        else:
            from lattice.query.caching import fit_cache_breakpoints

            fit_cache_breakpoints(request, count_cache_breakpoints(request), mark=False)
        assert count_cache_breakpoints(request) == MAX_BREAKPOINTS
        everything = ["tool:write", "system:0"] + [
            f"message:{i}:0" for i in range(0, len(history), 2)]
        assert marks(request) == everything[-MAX_BREAKPOINTS:]  # the newest four survive
        assert (history, system, tools) == before
        copied = [a is not b for a, b in zip(request.messages, history)]
        assert copied.count(True) == max(0, existing - 4 - 2)  # only the unmarked ones


def test_prompt_caching_against_the_mock_reads_more_each_turn_and_leaves_history_alone():
    steps = [reply(tool_use("echo", id=str(i))) for i in range(6)] + ["done"]
    with MockMessagesServer(steps) as server:
        agent = Agent(model="m", model_client=AnthropicClient(api_key="k",
                                                              base_url=server.base_url),
                      tools=[echo_tool()], system="You are terse. " * 50, prompt_caching=True)
        messages = list(agent.query("go"))
        reads = [m.usage.cache_read_input_tokens for m in messages if m.type == "assistant"]
        assert reads[0] == 0 and reads[-1] > reads[1] > 0
        body = server.requests[-1]["body"] if isinstance(server.requests[-1], dict) \
            and "body" in server.requests[-1] else server.requests[-1]
        assert "cache_control" in str(body)
    assert "cache_control" not in str(agent.get_history())


def test_each_query_counts_only_the_marks_of_messages_new_since_the_last():
    """The mark ledger lives with the conversation: a query on a long history does not walk
    it all again (it did in 0.3 before this test: 17x the cost at 10,000 messages)."""
    from lattice import Agent
    from lattice.testing import FunctionModelClient

    agent = Agent(model="m", model_client=FunctionModelClient(lambda r: "ok"))
    agent.replace_history([{"role": "user", "content": "q"}, {"role": "assistant",
                                                              "content": "a"}] * 500)
    seen = []

    class Counting(MarkLedger):
        def count(self, messages):
            seen.append(len(messages) - (self.counted if messages is self.messages else 0))
            return super().count(messages)

    ledger = agent._conversation.history.marks = Counting()
    for _ in range(3):
        agent.prompt("next")
    assert agent._conversation.history.marks is ledger
    assert seen[0] == 1001 and seen[1:] == [2, 2]  # all once, then the prompt and reply


# -- the 0.3 path lattice.caching (docs/upgrading.md): same objects, a warning, until 0.5 ----

@pytest.mark.parametrize("name", ["mark_cache_breakpoints", "count_cache_breakpoints",
                                  "fit_cache_breakpoints", "MAX_BREAKPOINTS"])
def test_the_old_caching_path_gives_the_same_names_with_a_deprecation_warning(name: str) -> None:
    import lattice.caching as old
    import lattice.query.caching as new

    with pytest.warns(DeprecationWarning, match=f"lattice.query.caching.{name}"):
        moved = getattr(old, name)
    assert moved is getattr(new, name)


def test_the_old_caching_path_names_what_it_does_not_have() -> None:
    import lattice.caching as old

    kept_here = "MarkLedger"  # in lattice.query.caching, never in the 0.3 module
    with pytest.raises(AttributeError, match="lattice.caching.*MarkLedger"):
        getattr(old, kept_here)
