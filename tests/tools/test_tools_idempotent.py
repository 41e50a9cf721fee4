"""``idempotent`` on tools (SPEC 17): Tool(...), @tool(...), MCP ``idempotentHint``; and the
ToolContext fields a tool uses to make its own side effects idempotent."""

import pytest

from lattice import AbortSignal, Tool, ToolContext, tool
from lattice.mcp import MCPServerStdio


def test_tools_are_not_idempotent_unless_declared():
    plain = Tool("a", "", {"type": "object"}, lambda args: "a")
    marked = Tool("b", "", {"type": "object"}, lambda args: "b", idempotent=True)
    assert plain.idempotent is False and marked.idempotent is True
    assert "idempotent" not in marked.definition  # lattice's own, never sent to a model

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    @tool
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    assert lookup.idempotent is True and pay.idempotent is False


def test_a_non_bool_idempotent_is_refused_by_name():
    with pytest.raises(ValueError, match="idempotent"):
        Tool("a", "", {"type": "object"}, lambda args: "a", idempotent="yes")
    def run() -> str:
        return "x"

    with pytest.raises(ValueError, match="idempotent"):
        tool(idempotent=1)(run)


def test_mcp_tools_follow_the_servers_idempotent_hint():
    server = MCPServerStdio("python")
    hinted = server._make_tool({"name": "get", "annotations": {"idempotentHint": True}})
    unhinted = server._make_tool({"name": "put", "annotations": {"idempotentHint": False}})
    bare = server._make_tool({"name": "other"})
    odd = server._make_tool({"name": "odd", "annotations": {"idempotentHint": "true"}})
    assert hinted.idempotent is True
    assert not (unhinted.idempotent or bare.idempotent or odd.idempotent)
    broken = server._make_tool({"name": "b", "annotations": {"idempotentHint": True},
                                "inputSchema": {"type": "object",
                                                "properties": {"p": {"type": "nonsense"}}}})
    assert broken.idempotent is True


def test_a_tool_context_outside_a_run_is_attempt_one_of_no_run():
    context = ToolContext(AbortSignal(), "toolu_1")
    assert context.run_id is None and context.attempt == 1
