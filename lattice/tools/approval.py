"""Approval (human in the loop, SPEC 12 and 16a), in one place.

- which calls wait for a person: ``needs_approval`` (the tool says so, or the Agent's
  ``requires_approval`` predicate), asked per batch through one query's ``Gate``;
- how a paused reply is marked in the history (``mark_pending``: SDK keys, kept by stores,
  never sent) and which calls wait on it (``pending_calls``);
- how the decisions given to resume it are checked (``check_decisions``: exactly the
  pending ids; ``True``, ``False``, a str or a ``ToolResult``; a str that reads as consent
  is refused, since it would deny);
- what a decision other than ``True`` becomes (``refusals``), and what the model reads
  when the user moved on without deciding (``moved_on``).

The batch itself then runs on the one tool-call path (``calls.execute_batch``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from ..cancellation import AbortSignal
from ..messages import copy_json, pending_tail, tool_result, tool_uses_of
from .calls import not_run, resolve_calls
from .definition import ToolCall, ToolResult, result_content

if TYPE_CHECKING:  # pragma: no cover
    from ..query.settings import QuerySettings

__all__ = ["needs_approval", "Gate", "mark_pending", "pending_calls", "check_decisions",
           "refusals", "moved_on", "CONSENT"]

Message = Dict[str, Any]
Outcome = Tuple[Dict[str, Any], bool]

CONSENT = frozenset(["yes", "y", "true", "ok", "approve", "approved", "1"])
"""Strings that read as consent: as a decision they would deny the call, so they are refused
(a str decision is the reason for a denial)."""


def needs_approval(call: ToolCall, settings: QuerySettings) -> bool:
    """Whether a call waits for a person's decision: its tool says so, or the Agent's
    ``requires_approval`` predicate does (never for unknown tools or invalid input)."""
    if call.problem is not None or call.tool is None:
        return False
    if call.tool.requires_approval:
        return True
    ask = settings.requires_approval
    return bool(ask(call)) if ask is not None else False


class Gate:
    """One query's answer to "which calls of this batch wait for approval?"."""

    __slots__ = ("settings", "may_pause")

    def __init__(self, settings: QuerySettings) -> None:
        self.settings = settings
        self.may_pause: Optional[bool] = None  # can any call wait? (found at the first batch)

    def waiting(self, calls: List[ToolCall]) -> List[ToolCall]:
        may_pause = self.may_pause
        if may_pause is None:
            s = self.settings
            may_pause = self.may_pause = s.requires_approval is not None or any(
                t.requires_approval for t in s.tools.values())
        return [c for c in calls if needs_approval(c, self.settings)] if may_pause else []


def mark_pending(reply: Message, waiting: List[ToolCall]) -> None:
    """Mark a reply whose batch waits (SDK keys: kept by stores, stripped from requests)."""
    reply["pending_approval"] = True
    reply["pending_approval_ids"] = [c.id for c in waiting]


def pending_calls(history: List[Message], settings: QuerySettings,
                  agent: Any) -> List[ToolCall]:
    """The calls of the history's paused tail that wait for a decision (empty when none)."""
    tail = pending_tail(history)
    if tail is None:
        return []
    calls = resolve_calls(copy_json(tool_uses_of(tail["content"])), settings.tools,
                          AbortSignal(), agent)
    ids = tail.get("pending_approval_ids")
    if "pending_children" in tail:  # subagents' calls wait (SPEC 22): theirs, with a path
        from .delegation import child_calls

        own = [c for c in calls if isinstance(ids, list) and c.id in ids]
        return own + child_calls(copy_json(tail), settings.tools, agent)
    if isinstance(ids, list):  # decided when the query paused
        return [c for c in calls if c.id in ids]
    return [c for c in calls if needs_approval(c, settings)]


def check_decisions(pending: List[str], approvals: Mapping[str, Any]) -> None:
    """``approvals`` must answer exactly the ``pending`` call ids, each with ``True``,
    ``False``, a str (not one that reads as consent) or a ``ToolResult`` (ValueError)."""
    if not pending:
        raise ValueError("approvals= given, but no tool call is waiting for approval")
    missing = [i for i in pending if i not in approvals]
    unknown = [i for i in approvals if i not in pending]
    if missing or unknown:
        raise ValueError(f"approvals must answer exactly the pending calls: missing "
                         f"{missing}, unknown {unknown}")
    for key, decision in approvals.items():
        if not isinstance(decision, (bool, str, ToolResult)):
            raise ValueError(f"approvals[{key!r}] must be True, False, a str or a "
                             f"ToolResult, got {decision!r}")
        if isinstance(decision, str) and decision.strip().lower() in CONSENT:
            raise ValueError(f"approvals[{key!r}] is {decision!r}: a str denies the call "
                             "with that reason; pass True to approve it")


def refusals(calls: List[ToolCall], decisions: Mapping[str, Any]) -> Dict[str, Outcome]:
    """The results of the calls a decision refused, by id (``False``: "the user did not
    approve it"; a str: that text, as an error; a ``ToolResult``: used as the result).
    A call with a problem (unknown tool, invalid input) keeps its own error."""
    out: Dict[str, Outcome] = {}
    for call in calls:
        decision = decisions.get(call.id, True)
        if decision is True or call.problem is not None:
            continue
        out[call.id] = refusal(call.id, decision)
    return out


def refusal(call_id: str, decision: Any) -> Outcome:
    """The result of call ``call_id`` refused by ``decision`` (not ``True``)."""
    if isinstance(decision, ToolResult):
        content, is_error, end_turn = result_content(decision)
        return tool_result(call_id, content, is_error=is_error), end_turn
    if isinstance(decision, str):
        return tool_result(call_id, decision, is_error=True), False
    return not_run(call_id, "denied"), False


def moved_on(tail: Message) -> Message:
    """The user message answering a paused reply's calls when a new prompt comes instead
    of decisions (a call that ran while a subagent paused keeps its result)."""
    answered = tail.get("answered") or {}
    return {"role": "user", "content": [answered.get(u.get("id")) or
                                        not_run(u.get("id", ""), "moved_on")
                                        for u in tool_uses_of(tail["content"])]}
