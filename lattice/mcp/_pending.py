"""A query ended ``awaiting_input`` (SPEC 23), seen from the history and resumed.

The loop marks the paused reply (``pending_input``: the questions left for the user, by
tool call id, as ``ElicitationRequest.to_dict``; ``answered``: what the batch's other calls
returned). Here: the questions again (``pending_requests``, for the result replayed and
``agent.pending_elicitations()``), and ``elicitation=`` turned into what the resumed batch
needs (``resume_batch``): the waiting calls are made again, each with the answers to its
questions; the other calls keep the results they had.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..tools.definition import ToolResult
from ._client import ElicitationRequest, check_answers

__all__ = ["pending_requests", "resume_batch"]

Answers = Dict[str, List[Tuple[ElicitationRequest, Dict[str, Any]]]]


def _asked(tail: Optional[Mapping[str, Any]]) -> Dict[str, List[ElicitationRequest]]:
    stored = tail.get("pending_input") if tail is not None else None
    if not isinstance(stored, dict):
        return {}
    return {cid: [ElicitationRequest.from_dict(r) for r in asked if isinstance(r, dict)]
            for cid, asked in stored.items() if isinstance(asked, list)}


def pending_requests(tail: Optional[Mapping[str, Any]]) -> List[ElicitationRequest]:
    """The questions a paused reply waits on (empty when it waits on none)."""
    return [r for asked in _asked(tail).values() for r in asked]


def resume_batch(tail: Mapping[str, Any], answers: Mapping[str, Any]
                 ) -> Tuple[Dict[str, Any], Answers]:
    """``answers`` (``elicitation=``: request id -> answer dict), checked (ValueError),
    as the batch's decisions (a waiting call: run it again; a call that had returned: its
    result) and each waiting call's answers."""
    asked = _asked(tail)
    check_answers([r for rs in asked.values() for r in rs], answers)
    decisions: Dict[str, Any] = {cid: True for cid in asked}
    for cid, block in (tail.get("answered") or {}).items():
        decisions[cid] = ToolResult(block.get("content"), is_error=bool(block.get("is_error")))
    by_call: Answers = {cid: [(r, dict(answers[r.id])) for r in rs] for cid, rs in asked.items()}
    return decisions, by_call
