"""The prompt cache ``MockMessagesServer`` simulates: ``PromptCache`` alone, then over HTTP."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

import pytest

from lattice.errors import BadRequestError
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.query.caching import mark_cache_breakpoints
from lattice.testing._mock_cache import LOOKBACK, PromptCache, breakpoint_problem
from lattice.testing.mock_server import MockMessagesServer

MARK = {"type": "ephemeral"}
TOOLS = [{"name": "read", "description": "Read a file by path.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
SYSTEM = "You are a careful assistant. " * 20
TOTAL = 100_000  # the whole prompt's tokens, as the server would count them


def chars(value: Any) -> int:
    """What one block adds to a prefix: its compact JSON and a separator."""
    return len(json.dumps(value, separators=(",", ":"), sort_keys=True)) + 1


def turn(n: int) -> List[Dict[str, Any]]:
    return [
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {"path": f"/f{n}"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"line {n}\n" * 30}]},
    ]


def body(messages: List[Dict[str, Any]], *, system: Any = SYSTEM, tools: Any = TOOLS,
         model: str = "claude-mock-1", cache: bool = True) -> Dict[str, Any]:
    """A request body as AnthropicClient sends it, marked like prompt_caching would."""
    request = ModelRequest(model=model, messages=list(messages), system=system,
                           tools=list(tools or []))
    if cache:
        mark_cache_breakpoints(request)
    out: Dict[str, Any] = {"model": model, "max_tokens": 1024, "messages": request.messages}
    if request.system is not None:
        out["system"] = request.system
    if request.tools:
        out["tools"] = request.tools
    return out


def test_without_marks_everything_is_input_and_nothing_is_stored() -> None:
    cache = PromptCache()
    for _ in range(2):
        usage = cache.usage(body([{"role": "user", "content": "hi"}], cache=False), TOTAL)
        assert usage == {"input_tokens": TOTAL, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0}
    assert len(cache) == 0


def test_first_request_writes_the_same_request_reads() -> None:
    cache = PromptCache()
    request = body([{"role": "user", "content": "Summarise the repo."}])
    first = cache.usage(request, TOTAL)
    # Tools, then the system block, then the message (its role wrapper with its first block).
    prefix = (chars(TOOLS[0]) + chars({"type": "text", "text": SYSTEM})
              + len('{"content":[],"role":"user"}')
              + chars({"type": "text", "text": "Summarise the repo."}))
    assert first == {"input_tokens": TOTAL - prefix // 4,
                     "cache_creation_input_tokens": prefix // 4, "cache_read_input_tokens": 0}
    second = cache.usage(request, TOTAL)
    assert second == {"input_tokens": TOTAL - prefix // 4, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": prefix // 4}
    assert sum(first.values()) == sum(second.values()) == TOTAL


def test_a_tool_loop_reads_more_and_more_from_the_cache() -> None:
    cache = PromptCache()
    history: List[Dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
    seen: List[Dict[str, int]] = []
    for n in range(1, 12):
        seen.append(cache.usage(body(history), TOTAL))
        history.extend(turn(n))
    assert seen[0]["cache_read_input_tokens"] == 0
    for before, after in zip(seen, seen[1:]):
        # Each turn reads exactly what the previous one had in the cache and writes the
        # two new blocks only.
        assert after["cache_read_input_tokens"] == (before["cache_read_input_tokens"]
                                                    + before["cache_creation_input_tokens"])
        assert 0 < after["cache_creation_input_tokens"] < 2 * seen[1]["cache_creation_input_tokens"]
    assert seen[-1]["cache_read_input_tokens"] > 10 * seen[-1]["cache_creation_input_tokens"]


def text_blocks(n: int, tag: str = "b") -> List[Dict[str, Any]]:
    return [{"type": "text", "text": f"{tag} {i}"} for i in range(n)]


@pytest.mark.parametrize("new_blocks, hit", [(LOOKBACK, True), (LOOKBACK + 1, False)])
def test_lookback_is_twenty_blocks_before_a_breakpoint(new_blocks: int, hit: bool) -> None:
    cache = PromptCache()
    start = [{"role": "user", "content": text_blocks(3, "start")}]
    first = cache.usage(body(start, system=None, tools=None), TOTAL)
    # The new blocks go in the same message: the old prefix ends new_blocks before the mark.
    grown = [{"role": "user", "content": text_blocks(3, "start") + text_blocks(new_blocks)}]
    usage = cache.usage(body(grown, system=None, tools=None), TOTAL)
    read = first["cache_creation_input_tokens"] if hit else 0
    assert usage["cache_read_input_tokens"] == read


def test_a_change_reads_only_the_prefix_before_it() -> None:
    """Tools come first, then the system prompt, then the messages; another model shares
    nothing."""
    cache = PromptCache()
    history = [{"role": "user", "content": "go"}, *turn(1)]
    cache.usage(body(history), TOTAL)
    tools_only = chars(TOOLS[0]) // 4
    with_system = (chars(TOOLS[0]) + chars({"type": "text", "text": SYSTEM})) // 4
    assert cache.usage(body(history, system="Another system prompt."), TOTAL)[
        "cache_read_input_tokens"] == tools_only
    changed = [{"role": "user", "content": "went"}, *turn(1)]
    assert cache.usage(body(changed), TOTAL)["cache_read_input_tokens"] == with_system
    assert cache.usage(body(history, model="claude-other"), TOTAL)[
        "cache_read_input_tokens"] == 0


def test_marks_are_not_part_of_the_prefix() -> None:
    """A prefix written at one breakpoint is found again from a later one, and a str
    system prompt is the same prefix as its one-text-block form."""
    cache = PromptCache()
    written = cache.usage(body([{"role": "user", "content": "go"}], system="S"), TOTAL)
    as_block = [{"type": "text", "text": "S"}]
    again = cache.usage(body([{"role": "user", "content": "go"}, *turn(1)], system=as_block),
                        TOTAL)
    assert again["cache_read_input_tokens"] == written["cache_creation_input_tokens"] > 0


def test_an_earlier_breakpoint_still_hits_when_the_conversation_changes() -> None:
    """The system and tool marks keep a new conversation's shared prefix cached."""
    cache = PromptCache()
    long_history = [{"role": "user", "content": "first"}]
    for n in range(1, 15):
        long_history.extend(turn(n))
    cache.usage(body(long_history), TOTAL)
    fresh = cache.usage(body([{"role": "user", "content": "a new task"}]), TOTAL)
    assert fresh["cache_read_input_tokens"] == (
        chars(TOOLS[0]) + chars({"type": "text", "text": SYSTEM})) // 4
    assert fresh["cache_creation_input_tokens"] > 0


def test_marks_in_tool_result_content_are_breakpoints() -> None:
    cache = PromptCache()
    inner = {"type": "text", "text": "result text", "cache_control": MARK}
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": [
                   {"type": "tool_use", "id": "t", "name": "read", "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                             "content": [inner]}]}]
    assert cache.usage(body(history, cache=False), TOTAL)["cache_creation_input_tokens"] > 0
    assert cache.usage(body(history, cache=False), TOTAL)["cache_read_input_tokens"] > 0


def test_more_than_four_marks_is_a_problem() -> None:
    blocks = [{**b, "cache_control": MARK} for b in text_blocks(5)]
    assert breakpoint_problem(body([{"role": "user", "content": blocks[:4]}],
                                   system=None, tools=None, cache=False)) is None
    problem = breakpoint_problem(body([{"role": "user", "content": blocks}], cache=False))
    assert problem == "A maximum of 4 blocks with cache_control may be provided. Found 5."


def test_clear_forgets_everything() -> None:
    cache = PromptCache()
    request = body([{"role": "user", "content": "go"}])
    cache.usage(request, TOTAL)
    assert len(cache) == 3  # one prefix per breakpoint
    cache.clear()
    assert cache.usage(request, TOTAL)["cache_read_input_tokens"] == 0


# -- over HTTP --------------------------------------------------------------------------

def send(client: AnthropicClient, messages: List[Dict[str, Any]], *, cache: bool = True,
         system: Optional[str] = SYSTEM) -> Dict[str, Any]:
    request = ModelRequest(model="claude-mock-1", messages=list(messages), system=system,
                           tools=list(TOOLS), max_tokens=256)
    if cache:
        mark_cache_breakpoints(request)
    return client.create(request)


@pytest.mark.parametrize("stream", [True, False])
def test_the_server_bills_marked_requests_against_its_cache(stream: bool) -> None:
    with MockMessagesServer(stream=stream) as server:
        client = AnthropicClient(api_key="sk-ant-test", base_url=server.base_url)
        history: List[Dict[str, Any]] = [{"role": "user", "content": "go"}]
        first = send(client, history)["usage"]
        history.extend(turn(1))
        second = send(client, history)["usage"]
        client.close()
    assert first["cache_read_input_tokens"] == 0 < first["cache_creation_input_tokens"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert 0 < second["cache_creation_input_tokens"] < second["cache_read_input_tokens"]
    assert second["input_tokens"] < second["cache_read_input_tokens"]
    # All three add up to the whole request body's size // 4, as without caching.
    size = len(json.dumps(server.requests[1], ensure_ascii=False, separators=(",", ":")))
    total = sum(second[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                    "cache_read_input_tokens"))
    assert total == pytest.approx(size // 4, abs=2)


def test_unmarked_requests_are_billed_as_before() -> None:
    with MockMessagesServer(stream=False) as server:
        client = AnthropicClient(api_key="sk-ant-test", base_url=server.base_url)
        for _ in range(2):
            usage = send(client, [{"role": "user", "content": "go"}], cache=False)["usage"]
            assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0
            size = len(json.dumps(server.requests[-1], separators=(",", ":")))
            assert usage["input_tokens"] == pytest.approx(size // 4, abs=2)
        client.close()


def test_scripted_usage_still_wins() -> None:
    scripted = {"content": "hi", "usage": {"cache_read_input_tokens": 7, "input_tokens": 3}}
    with MockMessagesServer([scripted], stream=False) as server:
        client = AnthropicClient(api_key="sk-ant-test", base_url=server.base_url)
        usage = send(client, [{"role": "user", "content": "go"}])["usage"]
        client.close()
    assert usage["cache_read_input_tokens"] == 7 and usage["input_tokens"] == 3
    assert usage["cache_creation_input_tokens"] > 0  # the simulated write, not scripted


def test_more_than_four_marks_get_a_400_and_keep_the_script() -> None:
    blocks = [{"type": "text", "text": f"b{i}", "cache_control": MARK} for i in range(5)]
    with MockMessagesServer(["scripted answer"], stream=False) as server:
        client = AnthropicClient(api_key="sk-ant-test", base_url=server.base_url)
        with pytest.raises(BadRequestError, match="A maximum of 4 blocks") as caught:
            client.create(ModelRequest(model="m", messages=[{"role": "user",
                                                              "content": blocks}]))
        assert caught.value.status_code == 400
        reply = client.create(ModelRequest(model="m", messages=[{"role": "user",
                                                                  "content": "ok"}]))
        client.close()
    assert reply["content"][0]["text"] == "scripted answer"
    assert len(server.requests) == 2
