"""Tools and one tool call's life.

- ``definition.py``: ``@tool``, ``Tool``, ``ToolContext``, ``ToolResult`` (what a tool is)
  and ``ToolCall`` (one call of it, as hooks and approvals see it);
- ``calls.py``: where a tool call is decided and run (resolve, validate, hooks, handler,
  one ``tool_result``; a batch; the journal's verdict on a call a crash left open);
- ``approval.py``: which calls wait for a person, and what the decisions become.

The public tool types are re-exported here (``from lattice.tools import Tool``); they
stand on the ground floor only, so importing this package loads nothing above it.
"""

from __future__ import annotations

from .definition import Tool, ToolCall, ToolContext, ToolResult, tool

__all__ = ["Tool", "ToolCall", "ToolContext", "ToolResult", "tool"]
