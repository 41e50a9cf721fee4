"""Prompt-caching breakpoints for Anthropic requests (SPEC 15, 16a).

A tool loop re-sends the whole conversation every turn. Marking the end of the request's
prefix with ``cache_control`` lets the provider read the previous turns from its cache
instead of billing them again. ``mark_cache_breakpoints`` places up to three marks: on the
last content block of the last message, on the system prompt and on the last tool
definition, never more than ``MAX_BREAKPOINTS`` counting the caller's own marks.

The caller's marks (in prompts, the system prompt, tool results) count too, and a request
never carries more than ``MAX_BREAKPOINTS`` whoever placed them (``fit_cache_breakpoints``):
lattice leaves its own out first, then drops the caller's oldest (in request order: tools,
system, messages). ``MarkLedger`` counts the history's marks once per message, so the
check costs a few dict lookups per turn.

The request's message dicts (and the system and tool lists) are shared with the history
and the Agent's settings, so every change goes on a copy: the history never sees one.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..models.base import ModelRequest

__all__ = ["mark_cache_breakpoints", "count_cache_breakpoints", "count_marks", "MAX_BREAKPOINTS",
           "fit_cache_breakpoints", "MarkLedger"]

MAX_BREAKPOINTS = 4
"""The Messages API refuses a request with more ``cache_control`` marks than this."""

# Blocks the API does not let carry a mark (thinking is cached along with its turn).
_UNMARKABLE = frozenset(["thinking", "redacted_thinking"])

Block = Dict[str, Any]


def mark_cache_breakpoints(request: ModelRequest) -> ModelRequest:
    """Mark ``request`` for prompt caching, in place, and return it.

    Only the request's own fields are reassigned (``messages``, ``system``, ``tools``); the
    dicts they held are replaced by marked copies, never edited, so the history and the
    Agent's tool definitions stay as they were. Marks go, while fewer than
    ``MAX_BREAKPOINTS`` are present, first on the last message (it covers the whole
    conversation), then on the system prompt, then on the last tool. A place that already
    carries a mark, or cannot carry one (no tools, an empty text, a thinking block), is
    skipped. A str system prompt or message content becomes one text block with the mark.
    More than ``MAX_BREAKPOINTS`` marks of the caller's: the oldest are dropped.
    """
    fit_cache_breakpoints(request, count_cache_breakpoints(request), mark=True)
    return request


def fit_cache_breakpoints(request: ModelRequest, present: int, *, mark: bool) -> None:
    """Keep ``request`` within ``MAX_BREAKPOINTS``; ``present`` is how many marks it
    carries already (the caller's). Over the limit, the oldest are dropped (on copies);
    under it, with ``mark``, lattice's own marks fill the room."""
    if present > MAX_BREAKPOINTS:
        _drop_oldest(request, present - MAX_BREAKPOINTS)
        return
    if not mark:
        return
    room = MAX_BREAKPOINTS - present
    for place in (_mark_last_message, _mark_system, _mark_last_tool):
        if room <= 0:
            break
        if place(request):
            room -= 1


class MarkLedger:
    """How many marks a history's user messages carry (prompts, tool results), each
    message counted once; the model's replies carry none.

    ``count(messages)`` is given the same list each turn (``History.sendable``, which only
    grows by appending); another list (compaction, ``replace_history``) is counted anew.
    """

    __slots__ = ("messages", "counted", "total")

    def __init__(self) -> None:
        self.messages: Optional[List[Any]] = None
        self.counted = 0
        self.total = 0

    def count(self, messages: List[Any]) -> int:
        if messages is self.messages:
            new = messages[self.counted:]  # a turn adds two
            if not new:
                return self.total
        else:  # another list (or the first): count it all
            self.messages, self.total, new = messages, 0, messages
        self.counted = len(messages)
        for message in new:
            if message.get("role") != "user":
                continue  # the model's replies carry no marks; prompts and results may
            content = message.get("content")
            if type(content) is list:
                for block in content:
                    if type(block) is dict and ("cache_control" in block
                                                or type(block.get("content")) is list):
                        self.total += count_marks([block])
        return self.total


def count_cache_breakpoints(request: ModelRequest) -> int:
    """How many ``cache_control`` marks ``request`` already carries, wherever they are."""
    count = count_marks(request.tools)
    if isinstance(request.system, list):
        count += count_marks(request.system)
    for message in request.messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += count_marks(content)
    return count


def count_marks(blocks: List[Any]) -> int:
    """How many blocks of ``blocks`` (and of the tool results among them) carry a mark."""
    count = 0
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("cache_control") is not None:
            count += 1
        inner = block.get("content")  # a tool_result's own blocks may carry marks too
        if block.get("type") == "tool_result" and isinstance(inner, list):
            count += count_marks(inner)
    return count


def _unmarked(blocks: List[Any], drop: int) -> Tuple[List[Any], int]:
    """A copy of ``blocks`` without its first ``drop`` marks (inside tool results too), and
    how many are still to drop."""
    out = list(blocks)
    for index, block in enumerate(blocks):
        if drop <= 0:
            break
        if not isinstance(block, dict):
            continue
        if block.get("cache_control") is not None:
            block = {k: v for k, v in block.items() if k != "cache_control"}
            drop -= 1
        inner = block.get("content")
        if drop > 0 and block.get("type") == "tool_result" and isinstance(inner, list) \
                and count_marks(inner):
            content, drop = _unmarked(inner, drop)
            block = {**block, "content": content}
        out[index] = block
    return out, drop


def _drop_oldest(request: ModelRequest, drop: int) -> None:
    """Remove the first ``drop`` marks in request order (tools, system, messages)."""
    if count_marks(request.tools):
        request.tools, drop = _unmarked(request.tools, drop)
    if drop > 0 and isinstance(request.system, list) and count_marks(request.system):
        request.system, drop = _unmarked(request.system, drop)
    messages = list(request.messages)
    for index, message in enumerate(messages):
        if drop <= 0:
            break
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and count_marks(content):
            content, drop = _unmarked(content, drop)
            messages[index] = {**message, "content": content}
    request.messages = messages


def _marked(block: Block) -> Block:
    return {**block, "cache_control": {"type": "ephemeral"}}


def _markable(block: Any) -> bool:
    if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def _mark_blocks(blocks: Any) -> Optional[List[Any]]:
    """A copy of ``blocks`` (a str or a list) whose last markable block carries a mark, or
    None when there is nothing to mark or the last markable block is already marked."""
    if isinstance(blocks, str):
        return [_marked({"type": "text", "text": blocks})] if blocks else None
    if not isinstance(blocks, list):
        return None
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if _markable(block):
            if block.get("cache_control") is not None:
                return None
            copy = list(blocks)
            copy[index] = _marked(block)
            return copy
    return None


def _mark_last_message(request: ModelRequest) -> bool:
    if not request.messages or not isinstance(request.messages[-1], dict):
        return False
    last = request.messages[-1]
    content = _mark_blocks(last.get("content"))
    if content is None:
        return False
    request.messages = [*request.messages[:-1], {**last, "content": content}]
    return True


def _mark_system(request: ModelRequest) -> bool:
    system = _mark_blocks(request.system)
    if system is None:
        return False
    request.system = system
    return True


def _mark_last_tool(request: ModelRequest) -> bool:
    tools = request.tools
    if not tools or not isinstance(tools[-1], dict) or tools[-1].get("cache_control"):
        return False
    request.tools = [*tools[:-1], _marked(tools[-1])]
    return True
