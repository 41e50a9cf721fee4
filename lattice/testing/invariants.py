"""Checks that a history is one the Messages API accepts."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

__all__ = ["history_problems", "assert_well_formed"]


def _blocks(message: Dict[str, Any], kind: str) -> List[Dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _paused(messages: Sequence[Dict[str, Any]], i: int) -> bool:
    """Message ``i`` is the last, a reply whose calls wait for approval (SPEC 12): a paused
    conversation, the one well-formed history with unanswered calls."""
    return i == len(messages) - 1 and bool(messages[i].get("pending_approval"))


def history_problems(messages: Sequence[Dict[str, Any]], *, strict_roles: bool = False,
                     strict: bool = False) -> List[str]:
    """Every way ``messages`` breaks the tool-pairing rules (empty when well-formed).

    - each assistant ``tool_use`` is answered by a ``tool_result`` with its id in the
      very next message, which is a user message; except in a last reply marked
      ``pending_approval`` (a conversation paused for approval), unless ``strict``
      (what a request needs: nothing may be unanswered);
    - every ``tool_result`` answers a ``tool_use`` of the message just before it;
    - roles are "user" or "assistant", content a str or a list.
    With ``strict_roles``: the first message is from the user and roles alternate
    (what a request right after compaction must satisfy).
    """
    problems: List[str] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"message {i}: role {role!r}")
        if not isinstance(message.get("content"), (str, list)):
            problems.append(f"message {i}: content is {type(message.get('content')).__name__}")
        if strict_roles:
            if i == 0 and role != "user":
                problems.append("message 0 is not from the user")
            if i > 0 and role == messages[i - 1].get("role"):
                problems.append(f"messages {i - 1} and {i} have the same role {role!r}")
        results = _blocks(message, "tool_result")
        if results:
            prev = messages[i - 1] if i > 0 else {}
            asked = {b.get("id") for b in _blocks(prev, "tool_use")} if prev.get(
                "role") == "assistant" else set()
            for block in results:
                if block.get("tool_use_id") not in asked:
                    problems.append(
                        f"message {i}: tool_result {block.get('tool_use_id')!r} answers no "
                        "tool_use of the previous message")
        uses = _blocks(message, "tool_use") if role == "assistant" else []
        if uses and (strict or not _paused(messages, i)):
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = ({b.get("tool_use_id") for b in _blocks(nxt, "tool_result")}
                        if nxt is not None and nxt.get("role") == "user" else set())
            for block in uses:
                if block.get("id") not in answered:
                    problems.append(f"message {i}: tool_use {block.get('id')!r} has no "
                                    "tool_result in the next message")
    return problems


def assert_well_formed(messages: Sequence[Dict[str, Any]], *, strict_roles: bool = False,
                       strict: bool = False) -> None:
    """Raise ``AssertionError`` listing every problem ``history_problems`` finds."""
    problems = history_problems(messages, strict_roles=strict_roles, strict=strict)
    if problems:
        raise AssertionError("history is not well-formed:\n  " + "\n  ".join(problems))
