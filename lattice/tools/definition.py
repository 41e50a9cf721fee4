"""Tools: ``@tool`` and ``Tool``, their input check, and what handlers may return.

A ``Tool`` checks its input against its schema (``validation_errors``) and turns what its
handler returned into tool_result content (``result_content``, ``error_text``). Running a
call, where nothing raises into the loop, is ``calls.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Protocol, Tuple, Union, overload

from ..cancellation import AbortSignal
from ..options import check_bool

__all__ = ["Tool", "ToolResult", "ToolContext", "ToolCall", "ToolLike", "ToolProvider", "tool",
           "as_tool", "flatten_tools", "to_jsonable"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclasses.dataclass
class ToolResult:
    """What a handler may return to control the result: its content, an error flag, and
    ``end_turn=True`` to end the query after this batch with this content as the result."""

    content: Any
    is_error: bool = False
    end_turn: bool = False


@dataclasses.dataclass
class ToolContext:
    """Given to handlers that ask for it: the query's signal, the call id, the agent, the
    durable run's id (None outside one) and which attempt at this call this is (1-based;
    above 1 only for an ``idempotent`` tool run again after a crash). ``tool_use_id`` is the
    same on every attempt: use it as the idempotency key of a side effect."""

    signal: AbortSignal
    tool_use_id: str
    agent: Any = None
    run_id: Optional[str] = None
    attempt: int = 1
    # The ``ToolCall`` (and through it the query) this context belongs to: what a subagent
    # tool reads to carry the parent's budget, approvals, traces and messages (SPEC 22).
    _call: Any = dataclasses.field(default=None, repr=False, compare=False)


def _is_context(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    # String annotations (``from __future__ import annotations``) name it.
    return isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "ToolContext"


class Tool:
    """A tool the model can call.

    ``handler`` is called as ``handler(input)`` or, if it takes two parameters,
    ``handler(input, context)``. ``@tool`` builds Tools whose handler gets keyword arguments
    (and the context in the parameter annotated ``ToolContext``, if any). ``takes_context``
    says whether the handler receives a context; the loop makes one only then.
    """

    __slots__ = ("name", "description", "input_schema", "handler", "_call", "_validator",
                 "definition", "strict", "requires_approval", "idempotent", "is_async",
                 "takes_context")

    def __init__(self, name: str, description: str, input_schema: Dict[str, Any],
                 handler: Callable[..., Any], *, strict: bool = False,
                 requires_approval: bool = False, idempotent: bool = False) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"tool name must match {_NAME.pattern}, got {name!r}")
        if not isinstance(description, str):
            raise ValueError(f"tool {name!r}: description must be a str, got {description!r}")
        if not isinstance(input_schema, dict) or input_schema.get("type", "object") != "object":
            raise ValueError(f"tool {name!r}: input_schema must be a JSON Schema dict with "
                             f'"type": "object", got {input_schema!r}')
        if not callable(handler):
            raise ValueError(f"tool {name!r}: handler must be callable, got {handler!r}")
        for option, flag in (("strict", strict), ("requires_approval", requires_approval),
                             ("idempotent", idempotent)):
            check_bool(f"tool {name!r}: {option}", flag)
        from .. import schema

        self.name = name
        self.description = description
        self.input_schema = input_schema
        self.handler = handler
        self._validator = schema.compile(input_schema)  # SchemaError names a broken schema
        self._call, self.takes_context = self._caller(handler)
        self.strict = strict
        self.requires_approval = requires_approval
        # Safe to run again when a crash left it unknown whether a call finished (SPEC 17).
        self.idempotent = idempotent
        self.is_async = inspect.iscoroutinefunction(handler)
        self.definition: Dict[str, Any] = {"name": name, "description": description,
                                           "input_schema": input_schema}
        if strict:
            self.definition["strict"] = True

    @staticmethod
    def _caller(handler: Callable[..., Any]
                ) -> Tuple[Callable[[Dict[str, Any], Any], Any], bool]:
        """How to call ``handler`` with ``(input, context)``, and whether it reads the
        context (if not, the loop never makes one)."""
        try:
            params = [p for p in inspect.signature(handler).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):  # builtins without a signature
            params = []
        if len(params) >= 2:
            return (lambda args, ctx: handler(args, ctx)), True
        return (lambda args, ctx: handler(args)), False

    def validation_errors(self, args: Any) -> Optional[str]:
        """None when ``args`` fits the input schema, else the errors as text."""
        if not isinstance(args, dict):
            return f"the input must be a JSON object, got {type(args).__name__}"
        if self._validator.is_valid(args):
            return None
        from ..schema import ValidationError

        try:
            self._validator.validate(args)
        except ValidationError as exc:
            return str(exc)
        return None

    def __call__(self, args: Dict[str, Any], context: Optional[ToolContext] = None) -> Any:
        return self._call(args, context)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"


def _function_tool(fn: Callable[..., Any], name: Optional[str],
                   description: Optional[str], **flags: bool) -> Tool:
    from ..schema import parse_docstring, schema_from_function

    input_schema = schema_from_function(fn, skip=_is_context)
    doc_description, _ = parse_docstring(inspect.getdoc(fn) or "")
    context_params = [p.name for p in inspect.signature(fn).parameters.values()
                      if _is_context(p.annotation)]
    context_name = context_params[0] if context_params else None

    def handler(args: Dict[str, Any], context: ToolContext) -> Any:
        if context_name is not None:
            return fn(**args, **{context_name: context})
        return fn(**args)

    made = Tool(name or fn.__name__, description if description is not None
                else doc_description, input_schema, handler, **flags)
    made.handler = fn  # what the user wrote, for introspection
    made.takes_context = context_name is not None
    made.is_async = inspect.iscoroutinefunction(fn)
    return made


@overload
def tool(fn: Callable[..., Any]) -> Tool: ...
@overload
def tool(fn: None = None, *, name: Optional[str] = None, description: Optional[str] = None,
         strict: bool = False, requires_approval: bool = False, idempotent: bool = False
         ) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None,
         description: Optional[str] = None, strict: bool = False,
         requires_approval: bool = False, idempotent: bool = False
         ) -> Union[Tool, Callable[[Callable[..., Any]], Tool]]:
    """Turn a typed function into a ``Tool``: ``@tool`` or ``@tool(name=..., ...)``.

    The input schema comes from the parameters' type hints and the docstring's parameter
    descriptions; a parameter annotated ``ToolContext`` receives the context instead.
    ``async def`` functions work too: they run on a private event loop in the worker
    thread, and the query's signal cancels them. ``strict=True`` marks the definition
    strict for providers that constrain tool input; ``requires_approval=True`` pauses the
    query for a person's decision before the call runs; ``idempotent=True`` lets a durable
    run resumed after a crash run a call again that may have run already (SPEC 17).
    """
    flags = {"strict": strict, "requires_approval": requires_approval,
             "idempotent": idempotent}
    if fn is not None:
        if not callable(fn):
            raise ValueError(f"@tool decorates a function, got {fn!r}")
        return _function_tool(fn, name, description, **flags)
    return lambda f: _function_tool(f, name, description, **flags)


def as_tool(obj: Any) -> Tool:
    """A ``Tool`` as is; a plain function as if decorated with ``@tool``."""
    if isinstance(obj, Tool):
        return obj
    if callable(obj) and (inspect.isfunction(obj) or inspect.ismethod(obj)):
        return _function_tool(obj, None, None)
    raise ValueError("tools must be Tool objects, functions or tool providers (objects with "
                     f"lattice_tools(), such as an MCP server), got {obj!r}")


class ToolProvider(Protocol):
    """An object that gives tools (``lattice.mcp`` servers): ``lattice_tools()``."""

    def lattice_tools(self) -> Iterable[Any]: ...


ToolLike = Union[Tool, Callable[..., Any], ToolProvider]
"""What ``tools=`` and ``add_tools()`` take: a ``Tool``, a typed function (made a tool as
``@tool`` would), or a tool provider."""


def flatten_tools(items: Any) -> List[Tool]:
    """``Tool``s from an iterable of tools, functions and tool providers (objects with a
    ``lattice_tools()`` method returning tools, e.g. ``lattice.mcp`` servers)."""
    if isinstance(items, (str, bytes, dict, Tool)) or callable(items) or \
            not hasattr(items, "__iter__"):
        raise ValueError(f"tools must be a list of tools, got {items!r}")
    made: List[Tool] = []
    for item in items:
        provide = getattr(item, "lattice_tools", None)
        if callable(provide) and not isinstance(item, Tool):
            made.extend(as_tool(t) for t in provide())
        else:
            made.append(as_tool(item))
    return made


# -- results -------------------------------------------------------------------------


def to_jsonable(value: Any) -> Any:
    """Best-effort JSON-ready form: dataclasses, pydantic-style models, sets, else repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def _is_blocks(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(b, dict) and "type" in b for b in value)


def result_content(value: Any) -> Tuple[Any, bool, bool]:
    """``(content, is_error, end_turn)`` for whatever a handler returned."""
    if isinstance(value, ToolResult):
        content, is_error, end_turn = value.content, bool(value.is_error), bool(value.end_turn)
    else:
        content, is_error, end_turn = value, False, False
    if isinstance(content, str) or _is_blocks(content):
        return content, is_error, end_turn
    return json.dumps(content, ensure_ascii=False, default=to_jsonable), is_error, end_turn


def error_text(tool_name: str, exc: BaseException) -> str:
    """What the model reads when a handler raised."""
    message = str(exc)
    return f"Tool {tool_name!r} raised {type(exc).__name__}" + (f": {message}" if message else "")


class ToolCall:
    """One call the model asked for, as hooks and approvals see it. ``run_id`` and
    ``attempt`` are what its ``ToolContext`` says (a durable run's id; which attempt).
    ``path`` is the list of tool_use ids from the top query's call down to this one
    (``[id]`` for a call of the query's own; longer for a subagent's call waiting for
    approval, SPEC 22)."""

    __slots__ = ("id", "name", "input", "tool", "problem", "run_id", "attempt", "_signal",
                 "_agent", "_context", "_path", "loop", "trace", "route")

    def __init__(self, id: str, name: str, input: Any, tool: Optional[Tool],
                 signal: AbortSignal, agent: Any, problem: Optional[Dict[str, Any]] = None
                 ) -> None:
        self.id = id
        self.name = name
        self.input = input
        self.tool = tool
        self.problem = problem  # the is_error result of an unknown tool or invalid input
        self.run_id: Optional[str] = None
        self.attempt = 1
        self._signal = signal
        self._agent = agent
        self._context: Optional[ToolContext] = None
        self._path: Optional[List[str]] = None
        self.loop: Any = None  # the query's Loop running it (what a subagent tool reads)
        self.trace: Any = None  # its tool span's token, while observers watch it
        # A subagent's call waiting for approval: the tool names from this query down
        self.route: Optional[List[str]] = None

    @property
    def path(self) -> List[str]:
        return list(self._path) if self._path is not None else [self.id]

    @path.setter
    def path(self, value: List[str]) -> None:
        self._path = list(value)

    def in_run(self, run_id: str, attempt: int) -> None:
        """The call is part of durable run ``run_id``, at ``attempt`` (its context says so)."""
        self.run_id, self.attempt = run_id, attempt

    @property
    def context(self) -> ToolContext:
        """The ``ToolContext`` its handler gets (made when first asked for: most handlers
        never take one)."""
        if self._context is None:
            self._context = ToolContext(self._signal, self.id, self._agent, self.run_id,
                                        self.attempt, _call=self)
        return self._context

    def __repr__(self) -> str:
        return f"<ToolCall {self.name} id={self.id}>"
