"""What one query runs with: the Agent's options plus per-query overrides, checked once.

Every option check lives here, so a bad value fails the same way (``ValueError`` naming
the option and the value) from ``Agent(...)``, ``query(...)`` and ``prompt(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .calls import ToolCall
    from .compaction import AutoCompact
    from .models.base import ModelClient, ModelRequest
    from .observe import Observer
    from .output import OutputSchema
    from .tools import Tool, ToolResult

__all__ = ["QuerySettings", "positive_int", "optional_positive_int", "check_bool",
           "check_callable", "non_negative_int"]


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def optional_positive_int(name: str, value: Any) -> Optional[int]:
    return None if value is None else positive_int(name, value)


def non_negative_int(name: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def non_negative_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return value


def check_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be callable, got {value!r}")
    return value


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
    observers: List[Observer] = field(default_factory=list)
