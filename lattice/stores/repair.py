"""Making a loaded transcript sendable before a resumed conversation continues.

A process that dies between a model reply and its tool results, a store that failed
half-way, or two processes that wrote one conversation at once leave histories the
provider rejects. ``repair_history`` rewrites any of them into one it accepts, keeping
every message it can:

- the conversation starts with a user message (a placeholder is put first if not);
- every ``tool_use`` is answered by a ``tool_result`` in the next message (results are
  added, first in that message, or as a new user message);
- a ``tool_result`` whose call is not in the previous message, or that answers a call
  twice, is dropped (a message left empty is dropped);
- a last reply whose calls wait for approval (``"pending_approval": true``) stays as is.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ..messages import pending_tail, tool_uses_of
from ..tools.calls import not_run
from .base import Message

__all__ = ["repair_history", "LOST_START_TEXT"]

LOST_START_TEXT = "(The start of this conversation was not recorded.)"


def _ids(message: Message) -> List[str]:
    return list(dict.fromkeys(u["id"] for u in tool_uses_of(message.get("content"))
                              if isinstance(u.get("id"), str)))


def _answer(message: Message, wanted: List[str]) -> Tuple[Message, bool]:
    """``message`` (a user message) keeping only results for ``wanted`` calls, each once,
    with a result added for every call it does not answer."""
    content = message.get("content")
    blocks: List[Any] = content if isinstance(content, list) else (
        [{"type": "text", "text": content}] if content else [])
    seen: Dict[str, Any] = {}
    others = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            key = block.get("tool_use_id")
            if key in wanted and key not in seen:
                seen[key] = block
        else:
            others.append(block)
    results = [seen.get(i) or not_run(i, "unfinished") for i in wanted]
    fixed = results + others
    if fixed == blocks and (isinstance(content, list) or not wanted):
        return message, False
    return {**message, "content": fixed if fixed else ""}, True


def repair_history(messages: List[Message]) -> Tuple[List[Message], bool]:
    """``(repaired, changed)``: a sendable copy of ``messages`` (which is not modified;
    unchanged messages are shared) and whether anything was changed."""
    out: List[Message] = []
    changed = False
    pending = pending_tail(messages)
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            changed = True
            continue
        if not out and role == "assistant":
            out.append({"role": "user", "content": LOST_START_TEXT})
            changed = True
        wanted = _ids(out[-1]) if out and out[-1]["role"] == "assistant" else []
        if role == "user":
            message, fixed = _answer(message, wanted)
            changed = changed or fixed
            if message.get("content") in ("", []):
                continue
        elif wanted:  # a reply after a reply whose calls were never answered
            out.append({"role": "user", "content": [not_run(i, "unfinished") for i in wanted]})
            changed = True
        out.append(message)
    if out and out[-1]["role"] == "assistant" and out[-1] is not pending and _ids(out[-1]):
        out.append({"role": "user", "content": [not_run(i, "unfinished") for i in _ids(out[-1])]})
        changed = True
    return out, changed
