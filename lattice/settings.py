"""What one query runs with: the Agent's options plus per-query overrides, checked once.

Every option check lives here, so a bad value fails the same way (``ValueError`` naming
the option and the value) from ``Agent(...)``, ``query(...)`` and ``prompt(...)``, and from
the other objects that take options (``AutoCompact``, ``Tool``, the tracing observer).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .calls import ToolCall
    from .compaction import AutoCompact
    from .models.base import ModelClient, ModelRequest
    from .observe import Observer
    from .output import OutputSchema
    from .tools import Tool, ToolResult

__all__ = ["QuerySettings", "Unset", "UNSET", "positive_int", "optional_positive_int",
           "non_negative_int", "optional_non_negative_int", "non_negative_number",
           "check_bool", "check_callable", "check_flags", "check_hooks", "check_model",
           "check_system", "check_extra", "check_history_store", "check_one_of",
           "check_instances"]


class Unset(enum.Enum):
    """"Not given" for a per-query override whose None means "no limit" (a one-member Enum,
    so a type checker knows ``UNSET`` is its only value)."""

    UNSET = "UNSET"


UNSET = Unset.UNSET


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def optional_positive_int(name: str, value: Any) -> Optional[int]:
    return None if value is None else positive_int(name, value)


def non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def optional_non_negative_int(name: str, value: Any) -> Optional[int]:
    return None if value is None else non_negative_int(name, value)


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


def check_flags(**flags: Any) -> None:
    """Each of ``flags`` is a bool."""
    for name, value in flags.items():
        check_bool(name, value)


def check_hooks(**hooks: Any) -> None:
    """Each of ``hooks`` is a callable or None."""
    for name, value in hooks.items():
        check_callable(name, value)


def check_model(model: Any, model_client: Any) -> Optional[str]:
    """``model``: a non-empty str, required unless a ``model_client`` may ignore it."""
    if model is not None and (not isinstance(model, str) or not model):
        raise ValueError(f"model must be a non-empty str, got {model!r}")
    if model is None and model_client is None:
        raise ValueError("model is required (or pass a model_client that ignores it)")
    return model


def check_system(system: Any) -> Any:
    if system is not None and not isinstance(system, (str, list)):
        raise ValueError(f"system must be a str or a list of content blocks, got {system!r}")
    return system


def check_extra(extra: Any) -> Dict[str, Any]:
    """``extra`` request body fields, as a new dict."""
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"extra must be a dict of request body fields, got {extra!r}")
    return dict(extra or {})


def check_history_store(store: Any) -> Any:
    if store is not None and not all(
            callable(getattr(store, m, None)) for m in ("load", "append", "replace")):
        raise ValueError(f"history_store must have load(), append() and replace(), got {store!r}")
    return store


def check_one_of(**options: Any) -> None:
    """At most one of ``options`` is set (not None)."""
    given = [name for name, value in options.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"set {' or '.join(options)}, not both")


def check_instances(name: str, values: Any, cls: type, what: str) -> List[Any]:
    """``values`` (an iterable or None) as a list of ``cls`` instances."""
    made = list(values or ())
    if not all(isinstance(v, cls) for v in made):
        raise ValueError(f"{name} must be {what}, got {values!r}")
    return made


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
