"""Making a loaded transcript well-formed before a resumed conversation continues.

A process that dies between a model reply and the tool results leaves an assistant
message whose ``tool_use`` blocks have no answer; the provider rejects such a history.
``repair_history`` computes what to append so the next request is valid.
"""

from __future__ import annotations

from typing import Any, List

from .base import Message

__all__ = ["repair_history", "UNFINISHED_CALL_TEXT"]

UNFINISHED_CALL_TEXT = (
    "The call did not complete: the previous session ended before its result was recorded."
)


def repair_history(messages: List[Message]) -> List[Message]:
    """The messages to append to ``messages`` so that it ends well-formed.

    If the last message is an assistant message with ``tool_use`` blocks (so nothing
    answers them), returns one user message holding an ``is_error`` ``tool_result`` per
    call, in ``tool_use`` order. Otherwise returns ``[]``.

    Not repaired (returns ``[]``): a last user message that answers only some of the
    previous assistant's calls. Lattice writes a batch's results as one message, so a torn
    batch cannot come from it; a hand-edited history is the host's to fix.
    ``messages`` is never modified.
    """
    if not messages:
        return []
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return []
    ids = _tool_use_ids(last.get("content"))
    if not ids:
        return []
    results = [
        {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": UNFINISHED_CALL_TEXT,
            "is_error": True,
        }
        for tool_use_id in ids
    ]
    return [{"role": "user", "content": results}]


def _tool_use_ids(content: Any) -> List[str]:
    """The ids of the ``tool_use`` blocks in ``content``, in order, each once."""
    if not isinstance(content, list):
        return []  # a plain-string content has no calls
    ids: List[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            tool_use_id = block.get("id")
            # A block without an id cannot be answered; duplicates get one answer.
            if isinstance(tool_use_id, str) and tool_use_id not in ids:
                ids.append(tool_use_id)
    return ids
