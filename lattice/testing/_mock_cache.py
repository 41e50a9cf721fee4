"""The prompt cache ``MockMessagesServer`` simulates (SPEC 15 and 16), as a pure class.

A request's prompt is a sequence of blocks in the order the real API caches it: the tool
definitions, then the system blocks, then each message's content blocks (a str is one text
block). A block carrying ``cache_control`` is a breakpoint. Like the real API:

* a breakpoint writes the prefix that ends at it (tokens not already read count as
  ``cache_creation_input_tokens``);
* a later request reads the longest prefix seen before that ends at one of its breakpoints
  or at any of the 20 blocks before one (``cache_read_input_tokens``);
* the rest of the prompt is ``input_tokens``.

Tokens are 1 per 4 characters of the prefix's compact JSON. A prefix is identified by a
chained hash of its blocks without their ``cache_control`` marks (moving a mark does not
change what is cached) and of the model. There is no expiry and no minimum size.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from ..query.caching import MAX_BREAKPOINTS, count_marks

__all__ = ["PromptCache", "LOOKBACK", "breakpoint_problem", "prompt_blocks"]

LOOKBACK = 20
"""How many blocks before a breakpoint the cache looks for an earlier prefix."""

# (hash input, characters the block adds to the prompt, carries a mark)
_Block = Tuple[bytes, int, bool]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _unmarked(block: Any) -> Tuple[Any, bool]:
    """``block`` without its ``cache_control`` (also inside a tool_result), and whether it
    had one."""
    if not isinstance(block, dict):
        return block, False
    marked = block.get("cache_control") is not None
    clean = {k: v for k, v in block.items() if k != "cache_control"}
    inner = clean.get("content")
    if clean.get("type") == "tool_result" and isinstance(inner, list):
        parts = [_unmarked(b) for b in inner]
        clean["content"] = [b for b, _ in parts]
        marked = marked or any(m for _, m in parts)
    return clean, marked


def _as_blocks(content: Any) -> List[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def prompt_blocks(body: Mapping[str, Any]) -> List[_Block]:
    """The request's prompt as cacheable blocks, in the API's order."""
    blocks: List[_Block] = []

    def add(where: List[Any], block: Any, wrapper: int = 0) -> None:
        clean, marked = _unmarked(block)
        text = _dumps(clean)
        blocks.append((_dumps([*where, clean]).encode("utf-8"), len(text) + 1 + wrapper,
                       marked))

    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        add(["tool"], tool)
    for block in _as_blocks(body.get("system")):
        add(["system"], block)
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        for index, block in enumerate(_as_blocks(message.get("content"))):
            # A message's first block starts it: the role and the wrapper belong to it.
            wrapper = len(_dumps({"content": [], "role": role})) if index == 0 else 0
            add(["message", role if index == 0 else None], block, wrapper)
    return blocks


def _count_marks(body: Mapping[str, Any]) -> int:
    """How many blocks of the request carry ``cache_control`` (cheap: no JSON made)."""
    return sum(count_marks(blocks) for blocks in _places(body))


def _places(body: Mapping[str, Any]) -> List[List[Any]]:
    """The block lists of a request: tools, system, each message's content."""
    tools, system, messages = body.get("tools"), body.get("system"), body.get("messages")
    places = [tools if isinstance(tools, list) else [],
              system if isinstance(system, list) else []]
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            places.append(message["content"])
    return places


def breakpoint_problem(body: Mapping[str, Any]) -> Optional[str]:
    """What the real API would refuse about the request's marks, or None."""
    found = _count_marks(body)
    if found > MAX_BREAKPOINTS:
        return (f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {found}.")
    return None


class PromptCache:
    """The prefixes written so far, and the usage of each new request against them.

    Thread-safe: the mock server's handler threads share one instance.
    """

    def __init__(self) -> None:
        self._prefixes: Set[bytes] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._prefixes)

    def usage(self, body: Mapping[str, Any], prompt_tokens: int) -> Dict[str, int]:
        """The input-token fields of the reply to ``body``, whose whole prompt counts
        ``prompt_tokens``; prefixes it marks are written for later requests."""
        if not _count_marks(body):  # the common case: no JSON made, nothing hashed
            return _usage(prompt_tokens, 0, 0)
        blocks = prompt_blocks(body)
        marks = [i for i, (_, _, marked) in enumerate(blocks) if marked]
        keys, ends = _chain(str(body.get("model")), blocks)
        with self._lock:
            hit = max((_longest_hit(self._prefixes, keys, mark) for mark in marks),
                      default=-1)
            self._prefixes.update(keys[mark] for mark in marks)
        read = ends[hit] // 4 if hit >= 0 else 0
        written = max(0, ends[marks[-1]] // 4 - read)
        return _usage(prompt_tokens, read, written)

    def clear(self) -> None:
        with self._lock:
            self._prefixes.clear()


def _usage(prompt_tokens: int, read: int, written: int) -> Dict[str, int]:
    return {"input_tokens": max(0, prompt_tokens - read - written),
            "cache_creation_input_tokens": written, "cache_read_input_tokens": read}


def _chain(model: str, blocks: List[_Block]) -> Tuple[List[bytes], List[int]]:
    """Each prefix's key (a hash chained over its blocks) and its size in characters."""
    keys: List[bytes] = []
    ends: List[int] = []
    key, size = hashlib.sha256(model.encode("utf-8")).digest(), 0
    for data, chars, _ in blocks:
        key = hashlib.sha256(key + data).digest()
        size += chars
        keys.append(key)
        ends.append(size)
    return keys, ends


def _longest_hit(prefixes: Set[bytes], keys: List[bytes], mark: int) -> int:
    """The end of the longest known prefix at ``mark`` or up to ``LOOKBACK`` blocks before
    it, or -1."""
    for end in range(mark, max(-1, mark - LOOKBACK - 1), -1):
        if keys[end] in prefixes:
            return end
    return -1
