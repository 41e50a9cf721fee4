"""A reply that waits for subagents (SPEC 22), as the history keeps it: the tool-level half
of approval bubbling, below the loop and the query.

When a subagent's query ends ``awaiting_approval`` inside a batch, the parent's reply is
marked like a reply of its own calls waiting (``approval.mark_pending``), with two more SDK
keys (kept by stores, never sent): ``pending_children`` (by the parent's call id, the
child's calls waiting, each with its ``path`` below that call and its ``route``, the tool
names down to it) and ``answered`` (what the batch's other calls returned: they are not
run again). ``mark_paused`` makes that reply; ``child_calls`` reads the children's calls
back as ``ToolCall``s with their ``path`` from the parent; ``split_decisions`` turns
``approvals=`` (by those calls' ids) into decisions for the parent's batch and for each
child. The ``SubagentTool`` itself is ``subagents.py``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..cancellation import AbortSignal
from ..usage import Usage
from .calls import Outcome
from .definition import Tool, ToolCall, ToolResult

__all__ = ["mark_paused", "child_calls", "split_decisions"]


def mark_paused(reply: Dict[str, Any], done: List[Outcome],
                paused: Dict[str, List[ToolCall]], spent: Usage
                ) -> Tuple[Dict[str, Any], List[ToolCall]]:
    """A new dict for ``reply`` marked as waiting for its children ``paused`` (by call id:
    their calls waiting), keeping what the batch's other calls returned (``done``) and what
    the children spent (``spent``, for a durable run's totals); and the children's calls,
    their ``path`` and ``route`` now seen from this query."""
    answered = {b["tool_use_id"]: b for b, _ in done if b.get("tool_use_id") not in paused}
    marked = dict(reply, pending_approval=True, pending_approval_ids=[],
                  pending_children={cid: [_describe(c) for c in calls]
                                    for cid, calls in paused.items()},
                  answered=answered)
    if spent.input_tokens or spent.output_tokens or spent.by_model:
        marked["subagent_usage"] = (Usage.from_dict(reply.get("subagent_usage")) + spent
                                    ).to_dict(by_model=True)
    names = _names(reply)
    pending = []
    for cid, calls in paused.items():
        for call in calls:  # seen from this query: one level more
            call.route = [str(names.get(cid))] + (call.route or [call.name])
            call.path = [cid] + call.path
            pending.append(call)
    return marked, pending


def _names(reply: Dict[str, Any]) -> Dict[Any, Any]:
    return {u.get("id"): u.get("name") for u in reply.get("content") or []
            if isinstance(u, dict) and u.get("type") == "tool_use"}


def _describe(call: ToolCall) -> Dict[str, Any]:
    return {"id": call.id, "name": call.name, "input": call.input, "path": call.path,
            "route": call.route or [call.name]}


def child_calls(tail: Dict[str, Any], tools: Dict[str, Tool], agent: Any) -> List[ToolCall]:
    """The children's calls a marked reply waits for, as ``ToolCall``s with their ``path``
    (their tools found through the subagent tools, when they still exist)."""
    children = tail.get("pending_children")
    if not isinstance(children, dict):
        return []
    names = _names(tail)
    out = []
    for cid, items in children.items():
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            route = [names.get(cid)] + list(item.get("route") or [item.get("name")])
            call = ToolCall(item["id"], str(item.get("name")), item.get("input") or {},
                            _find(tools, route), AbortSignal(), agent)
            call.path = [cid] + list(item.get("path") or [item["id"]])
            call.route = [str(name) for name in route[1:]]
            out.append(call)
    return out


def _find(tools: Dict[str, Tool], route: List[Any]) -> Optional[Tool]:
    """The tool at the end of ``route``: subagent tools' names (each one's ``template``
    Agent has the next tools), then the call's tool."""
    found: Optional[Tool] = None
    for name in route:
        found = tools.get(name) if isinstance(name, str) else None
        if found is None:
            return None
        template = getattr(found, "template", None)
        if template is not None:
            tools = template._settings.tools
    return found


def split_decisions(tail: Dict[str, Any], approvals: Dict[str, Any]
                    ) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]:
    """``approvals`` (by the ids of the calls waiting: the reply's own and its children's)
    as decisions for the reply's batch (a waiting child's call: run it again, with its
    decisions; a call that had returned: its result) and the decisions of each child."""
    children = tail.get("pending_children")
    if not isinstance(children, dict):
        return dict(approvals), {}
    batch: Dict[str, Any] = {}
    own: Dict[str, Dict[str, Any]] = {}
    child_ids = set()
    for cid, items in children.items():
        ids = [i.get("id") for i in items if isinstance(i, dict)]
        own[cid] = {i: approvals[i] for i in ids if i in approvals}
        child_ids.update(ids)
        batch[cid] = True
    for key, decision in approvals.items():
        if key not in child_ids:
            batch[key] = decision
    for cid, block in (tail.get("answered") or {}).items():
        batch[cid] = ToolResult(block.get("content"), is_error=bool(block.get("is_error")))
    return batch, own
