"""JSON data model helpers: instance kinds, JSON equality, and short value descriptions.

Python values stand in for JSON ones: dict/list/str/int/float/bool/None. The traps are that
``bool`` is a subclass of ``int`` (``True`` is not a JSON number) and that ``1 == 1.0`` (JSON
numbers compare by value). Everything here keeps those two rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

__all__ = [
    "OBJECT",
    "ARRAY",
    "STRING",
    "NUMBER",
    "KIND_TYPES",
    "JSON_TYPES",
    "canonical_type",
    "json_type_name",
    "json_equal",
    "freeze",
    "describe",
    "short_json",
    "MAX_DEPTH",
    "nesting_depth",
    "too_deep",
]

# How deep a depth report looks (``nesting_depth``); see ``too_deep``.
MAX_DEPTH = 500

# Instance kinds a keyword can apply to; ``None`` means "any instance".
OBJECT = "object"
ARRAY = "array"
STRING = "string"
NUMBER = "number"

# The exact Python types of each kind; keyword dispatch looks up ``type(x)`` in tables
# built from these, so subclasses go through ``canonical_type`` instead.
KIND_TYPES: dict[str, tuple[type, ...]] = {
    OBJECT: (dict,),
    ARRAY: (list,),
    STRING: (str,),
    NUMBER: (int, float),
}
JSON_TYPES: frozenset[type] = frozenset({dict, list, str, int, float, bool, type(None)})


def canonical_type(value: Any) -> Optional[type]:
    """The JSON base type a non-exact instance stands for (``None`` when it has none).

    Only called on the slow path: dict/tuple subclasses, ``IntEnum`` members and friends.
    """
    if isinstance(value, bool):
        return bool
    if isinstance(value, str):
        return str
    if isinstance(value, int):
        return int
    if isinstance(value, float):
        return float
    if isinstance(value, Mapping):
        return dict
    if isinstance(value, (list, tuple)):
        return list
    return None


_TYPE_NAMES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def json_type_name(value: Any) -> str:
    """The JSON type of ``value`` as a word for messages ("integer" for ``2.0`` too)."""
    t = type(value) if type(value) in JSON_TYPES else canonical_type(value)
    if t is float and value.is_integer():
        return "integer"
    return _TYPE_NAMES.get(t, type(value).__name__) if t is not None else type(value).__name__


def json_equal(a: Any, b: Any) -> bool:
    """Equality under JSON rules: ``1 == 1.0`` but ``True != 1``, recursively."""
    ta = type(a) if type(a) in JSON_TYPES else canonical_type(a)
    tb = type(b) if type(b) in JSON_TYPES else canonical_type(b)
    if ta is bool or tb is bool:
        return ta is tb and bool(a == b)
    if ta in (int, float):
        return tb in (int, float) and bool(a == b)
    if ta is not tb:
        return False
    if ta is list:
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if ta is dict:
        if len(a) != len(b):
            return False
        return all(k in b and json_equal(v, b[k]) for k, v in a.items())
    return bool(a == b)


def freeze(value: Any) -> Any:
    """A hashable key such that ``freeze(a) == freeze(b)`` exactly when ``json_equal(a, b)``.

    Tags keep booleans apart from numbers; ``1`` and ``1.0`` already hash and compare equal.
    """
    t = type(value) if type(value) in JSON_TYPES else canonical_type(value)
    if t is bool:
        return ("b", bool(value))
    if t is list:
        return ("a", tuple(freeze(v) for v in value))
    if t is dict:
        return ("o", frozenset((k, freeze(v)) for k, v in value.items()))
    if t in (int, float):
        return ("n", value)
    return ("s", value) if t is str else ("x", value)


def short_json(value: Any, limit: int = 60) -> str:
    """Compact JSON text for a value, cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=repr)
    except (TypeError, ValueError):
        text = _repr(value)
    except RecursionError:
        text = f"{'[' if isinstance(value, list) else '{'}... (nested too deeply to show)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(value: Any) -> str:
    """``string "3"``, ``integer 12``, ``object`` ...: what an instance is, for messages."""
    name = json_type_name(value)
    if name in ("object", "array"):
        return name if not value else f"{name} {short_json(value, 40)}"
    if name == "null":
        return "null"
    return f"{name} {short_json(value, 40)}"


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How many arrays/objects deep ``value`` goes (a scalar is 0), counting no further than
    ``limit + 1``; iterative, so any depth is safe to measure."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list, tuple)):
            depth += 1
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth) for child in children)
    return deepest


def too_deep(value: Any, what: str = "validate") -> str:
    """The message for a value nested deeper than the stack lets us follow."""
    depth = nesting_depth(value)
    levels = f"more than {MAX_DEPTH}" if depth > MAX_DEPTH else str(depth)
    return (f"is nested too deeply to {what} ({levels} levels of arrays and objects; "
            "Python's recursion limit was reached)")
