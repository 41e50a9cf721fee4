"""The seam between the loop and a provider: ``ModelRequest`` in, an assistant dict out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Union, runtime_checkable

from ..cancellation import AbortSignal

__all__ = ["ModelRequest", "ModelClient", "as_model_client", "ReplyDict",
           "MALFORMED_CALL"]

ReplyDict = Dict[str, Any]
"""``{"role": "assistant", "content": [...], "stop_reason": ..., "usage": {...}, ...}``."""

# stop_reason of a reply whose function call was malformed (Gemini's MALFORMED_FUNCTION_CALL,
# UNEXPECTED_TOOL_CALL): no call to answer; the loop asks the model to call again (SPEC 25a)
MALFORMED_CALL = "malformed_function_call"


def _no_signal() -> AbortSignal:
    return AbortSignal()


@dataclass
class ModelRequest:
    """One model call. A new one is made for every call; hooks may change it freely.

    ``messages`` is a fresh list of provider-ready ``{"role", "content"}`` dicts. The dicts
    themselves are shared with the history (a client must not edit them); the
    ``on_model_request`` hook gets a deep copy of its own, which it may edit in place.
    """

    model: Optional[str]
    messages: List[Dict[str, Any]]
    system: Any = None
    tools: List[Dict[str, Any]] = field(default_factory=list)
    max_tokens: int = 8192
    signal: AbortSignal = field(default_factory=_no_signal)
    timeout_ms: Optional[int] = None
    on_event: Optional[Callable[[Dict[str, Any]], None]] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    output_format: Optional[Dict[str, Any]] = None  # JSON Schema the final answer must fit


@runtime_checkable
class ModelClient(Protocol):
    """Anything with ``create(request) -> assistant dict``. A client may also have a
    ``provider_name`` str (``gen_ai.provider.name`` in traces, e.g. ``"openai"``); without
    it tracing names the provider from the client's class."""

    def create(self, request: ModelRequest) -> ReplyDict:  # pragma: no cover - protocol
        ...


class _CallableClient:
    """Adapts a plain ``request -> dict`` callable to the ``ModelClient`` protocol."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[ModelRequest], ReplyDict]) -> None:
        self.fn = fn

    def create(self, request: ModelRequest) -> ReplyDict:
        return self.fn(request)

    def __repr__(self) -> str:
        return f"<callable model client {self.fn!r}>"


def as_model_client(obj: Union[ModelClient, Callable[[ModelRequest], ReplyDict]]) -> ModelClient:
    """Return ``obj`` if it has ``.create``, wrap it if it is callable, else raise."""
    if callable(getattr(obj, "create", None)):
        return obj  # type: ignore[return-value]
    if callable(obj):
        return _CallableClient(obj)
    raise ValueError(
        f"model_client must have a .create(request) method or be a callable, got {obj!r}"
    )
