"""Making a loaded transcript well-formed before a resumed conversation continues.

A process that dies between a model reply and the tool results leaves an assistant
message whose ``tool_use`` blocks have no answer; the provider rejects such a history.
``repair_history`` computes what to append so the next request is valid.
"""

from __future__ import annotations

from typing import List

from ..messages import tool_result, tool_uses_of
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
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return []
    # A block without an id cannot be answered; duplicates get one answer.
    ids = dict.fromkeys(
        use["id"] for use in tool_uses_of(last.get("content")) if isinstance(use.get("id"), str)
    )
    if not ids:
        return []
    results = [tool_result(tool_use_id, UNFINISHED_CALL_TEXT, True) for tool_use_id in ids]
    return [{"role": "user", "content": results}]
