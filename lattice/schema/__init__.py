"""JSON Schema for tool inputs and structured output: a validator and schemas from type hints.

Validation (drafts 2020-12 and 7, hand-written, no network)::

    from lattice import schema
    schema.validate({"n": "3"}, {"type": "object", "properties": {"n": {"type": "integer"}}})
    # ValidationError: $.n: expected integer, got string "3"

    v = schema.compile(tool_schema)      # compiled once, cached; reuse freely
    v.is_valid(instance); v.validate(instance); v.errors(instance)

Schemas from Python types: ``schema_from_type(tp)``, ``schema_from_function(fn)``, and
``parse_docstring(doc)`` for the description and per-parameter texts of a docstring.

Instances come from a model, so validation is bounded in time and depth:

* ``pattern`` and ``patternProperties`` use Python's ``re`` only on strings up to a length
  derived from the pattern's shape (how many ways backtracking could split a string:
  nested quantifiers such as ``(a+)+``, ``(a|a)*`` or ``(.*)*`` allow only a few
  characters, ``^[a-z]+$`` millions). Longer strings go to a lazily built DFA, linear in
  the string, with the same answer. A pattern with lookarounds or backreferences has no
  DFA: a longer string fails as ``is too long (N characters) to be checked against the
  pattern ...``. ``format: "regex"`` only compiles its string, which is never slow.
* Validation follows an instance as deep as the schema does; when a recursive schema
  would go deeper than Python's recursion limit allows (about 300 levels of arrays and
  objects at the default limit of 1000), the instance is invalid with one error,
  ``$: is nested too deeply to validate (...)``, never a ``RecursionError``. Schemas and
  type hints nested too deeply to compile raise ``SchemaError``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import SchemaError
from ._api import Validator, compile, is_valid, validate
from ._errors import ErrorDetail, ValidationError, format_path

__all__ = [
    # validation
    "validate",
    "is_valid",
    "compile",
    "Validator",
    "ValidationError",
    "ErrorDetail",
    "SchemaError",
    "format_path",
    # schemas from Python
    "schema_from_type",
    "schema_from_function",
    "parse_docstring",
]


def schema_from_type(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a type hint (dataclass, TypedDict, Enum, Literal, unions...).

    Named types (dataclasses, TypedDicts, Enums) go to ``$defs`` and are ``$ref``-ed, so
    recursive types work. Raises ``SchemaError`` for types JSON cannot express.
    """
    from ._from_type import schema_from_type as build

    return build(tp)


def schema_from_function(
    fn: Callable[..., Any], *, skip: Optional[Callable[[Any], bool]] = None
) -> dict[str, Any]:
    """The object schema of ``fn``'s parameters, described from its docstring.

    ``self``/``cls``, ``**kwargs`` and parameters whose annotation ``skip`` accepts (by
    default: a class named ``ToolContext``) are left out; ``*args`` raises ``SchemaError``.
    """
    from ._from_type import schema_from_function as build

    return build(fn, skip=skip)


def parse_docstring(doc: Optional[str]) -> tuple[str, dict[str, str]]:
    """``(description, {param: text})`` from a Google, NumPy or reST docstring.

    The description is the summary and body with the parameter section removed.
    """
    from ._docstrings import parse_docstring as parse

    return parse(doc)
