"""What one query runs with: the Agent's options plus per-query overrides, checked once
(the checks are ``lattice/options.py``), as one value a query copies at its start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ..compaction.rules import AutoCompact
    from ..models.base import ModelClient, ModelRequest
    from ..observe.observer import Observer
    from ..tools.definition import Tool, ToolCall, ToolResult
    from .output import OutputSchema

__all__ = ["QuerySettings"]


@dataclass
class QuerySettings:
    """Everything one query runs with. A query gets its own copy: changing the Agent
    (``add_tools``) while it runs affects the next query only."""

    model: Optional[str]
    client: ModelClient
    system: Any = None
    tools: Dict[str, Tool] = field(default_factory=dict)
    tool_definitions: List[Dict[str, Any]] = field(default_factory=list)
    max_turns: int = 50
    max_tokens: int = 8192
    request_timeout_ms: Optional[int] = None
    auto_compact: Optional[AutoCompact] = None
    output: Optional[OutputSchema] = None
    output_native: bool = False  # output_format: the provider constrains the final text
    max_output_retries: Optional[int] = None
    on_model_request: Optional[Callable[[ModelRequest], Optional[ModelRequest]]] = None
    include_partial_messages: bool = False
    parallel_tool_calls: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)
    before_tool_call: Optional[Callable[[ToolCall], Any]] = None
    after_tool_call: Optional[Callable[[ToolCall, ToolResult], Any]] = None
    requires_approval: Optional[Callable[[ToolCall], bool]] = None
    prompt_caching: bool = False
    max_budget_tokens: Optional[int] = None
    prices: Optional[Dict[str, Dict[str, float]]] = None  # over the bundled table (cost.py)
    max_cost_usd: Optional[float] = None
    observers: List[Observer] = field(default_factory=list)
    name: Optional[str] = None  # the Agent's name (traces: gen_ai.agent.name; as_tool)
    include_subagent_messages: bool = False  # query(): yield the subagents' messages too
