"""``unevaluatedProperties``/``unevaluatedItems`` and the annotations they depend on.

"Evaluated" means: named by ``properties``, matched by ``patternProperties``, covered by
``additionalProperties`` (items: ``prefixItems``, ``items``, ``contains``), in this schema
or in any in-place subschema that the instance is valid against (``allOf``, the matching
``anyOf``/``oneOf`` branches, ``if`` and the chosen ``then``/``else``, ``dependentSchemas``,
``$ref``, ``$dynamicRef``). ``not`` contributes nothing.

The functions built here answer "which names/indices did this schema evaluate?" for an
instance, returning ``True`` for "all of them". They are built lazily (see
``Node.props``), so only schemas reachable from an ``unevaluated*`` keyword get them.
Children are always reached through ``node.ok``/``node.props`` attribute lookups, because
a child may still be compiling when these are built (recursive schemas).
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import methodcaller
from typing import Any, Callable, Optional

from ._applicators import part_errors
from ._checks import Check, Path
from ._compiler import Env, Evaluated, Node
from ._errors import ErrorDetail
from ._json import ARRAY, OBJECT
from ._regex import compile_pattern

__all__ = ["build_items", "build_props", "kw_unevaluated_items", "kw_unevaluated_properties"]

Part = Callable[[Any], Evaluated]
_EMPTY: frozenset[Any] = frozenset()


def _nothing(x: Any) -> Evaluated:
    return _EMPTY


def _union(parts: list[Part]) -> Part:
    if not parts:
        return _nothing
    if len(parts) == 1:
        return parts[0]

    def evaluated(x: Any) -> Evaluated:
        acc: set[Any] = set()
        for part in parts:
            found = part(x)
            if found is True:
                return True
            acc.update(found)  # type: ignore[arg-type]
        return acc

    return evaluated


def _in_place(node: Node, attr: str) -> list[Part]:
    """What in-place subschemas of ``node`` evaluated, read through ``attr`` (props/items)."""
    env = Env(node.compiler, node)
    schema = node.schema
    parts: list[Part] = []

    def always(n: Node) -> Part:
        return lambda x: getattr(n, attr)(x)

    def if_valid(n: Node) -> Part:
        return lambda x: getattr(n, attr)(x) if n.ok(x) else _EMPTY

    if "$ref" in schema:
        parts.append(always(env.ref(schema["$ref"], "$ref")))
        if node.draft == "7":
            return parts  # the draft-07 $ref hides its siblings
    if "$dynamicRef" in schema:
        parts.append(always(env.ref(schema["$dynamicRef"], "$dynamicRef", dynamic=True)))
    for i, sub in enumerate(schema.get("allOf", ())):
        parts.append(always(env.sub(sub, "allOf", i)))
    for keyword in ("anyOf", "oneOf"):
        for i, sub in enumerate(schema.get(keyword, ())):
            parts.append(if_valid(env.sub(sub, keyword, i)))
    if "if" in schema:
        parts.append(_conditional(env, schema, attr))
    for keyword in ("dependentSchemas", "dependencies"):
        deps = schema.get(keyword)
        if isinstance(deps, dict):
            for key, sub in deps.items():
                if not isinstance(sub, list):
                    parts.append(_when_present(key, env.sub(sub, keyword, key), attr))
    return parts


def _when_present(key: str, n: Node, attr: str) -> Part:
    return lambda x: getattr(n, attr)(x) if key in x else _EMPTY


def _conditional(env: Env, schema: dict[str, Any], attr: str) -> Part:
    cond = env.sub(schema["if"], "if")
    then = env.sub(schema["then"], "then") if "then" in schema else None
    other = env.sub(schema["else"], "else") if "else" in schema else None

    def evaluated(x: Any) -> Evaluated:
        if cond.ok(x):
            found = getattr(cond, attr)(x)
            extra = getattr(then, attr)(x) if then is not None else _EMPTY
        else:
            found, extra = _EMPTY, getattr(other, attr)(x) if other is not None else _EMPTY
        if found is True or extra is True:
            return True
        return set(found) | set(extra)

    return evaluated


def build_props(node: Node, skip_self: bool = False) -> Part:
    """Property names of an object that ``node`` evaluates (``node`` assumed valid on it)."""
    schema = node.schema
    if not isinstance(schema, dict):
        return _nothing
    if node.draft == "7" and "$ref" in schema:
        return _union(_in_place(node, "props"))
    if "additionalProperties" in schema or (not skip_self and "unevaluatedProperties" in schema):
        return lambda x: True
    parts = _in_place(node, "props")
    props = schema.get("properties")
    if isinstance(props, dict) and props:
        names = frozenset(props)
        parts.append(lambda x: names.intersection(x))
    patterns = schema.get("patternProperties")
    if isinstance(patterns, dict) and patterns:
        searches = [compile_pattern(p).search for p in patterns]
        parts.append(lambda x: {k for k in x if any(s(k) for s in searches)})
    return _union(parts)


def build_items(node: Node, skip_self: bool = False) -> Part:
    """Indices of an array that ``node`` evaluates (``node`` assumed valid on it)."""
    schema = node.schema
    if not isinstance(schema, dict):
        return _nothing
    if node.draft == "7" and "$ref" in schema:
        return _union(_in_place(node, "items"))
    items = schema.get("items")
    if (not skip_self and "unevaluatedItems" in schema) or isinstance(items, (dict, bool)):
        return lambda x: True
    if isinstance(items, list) and "additionalItems" in schema:
        return lambda x: True
    parts = _in_place(node, "items")
    prefix = items if isinstance(items, list) else schema.get("prefixItems")
    if isinstance(prefix, list) and prefix:
        n = len(prefix)
        parts.append(lambda x: set(range(min(n, len(x)))))
    if "contains" in schema and node.draft != "7":
        c = Env(node.compiler, node).sub(schema["contains"], "contains")
        parts.append(lambda x: {i for i, v in enumerate(x) if c.ok(v)})
    return _union(parts)


def _unevaluated(
    env: Env, value: Any, keyword: str, kind: str, build: Callable[..., Part],
    parts: Callable[[Any], Iterable[tuple[Any, Any]]], unexpected: str,
) -> Optional[Check]:
    """``value`` applied to each (key, part) of ``parts(x)`` that ``build`` did not evaluate."""
    node = env.sub(value, keyword)
    if node.schema is True:
        return None
    f = node.call_ok()
    seen = build(env.node, skip_self=True)
    part = part_errors(node, keyword, unexpected.format)

    def ok(x: Any) -> bool:
        evaluated = seen(x)
        if evaluated is True:
            return True
        for k, v in parts(x):
            if k not in evaluated and not f(v):  # type: ignore[operator]
                return False
        return True

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        evaluated = seen(x)
        if evaluated is True:
            return
        for k, v in parts(x):
            if k not in evaluated:  # type: ignore[operator]
                part(k, v, path, spath, out)

    return Check(kind, ok, errs, keyword)


def kw_unevaluated_properties(env: Env, value: Any) -> Optional[Check]:
    return _unevaluated(
        env, value, "unevaluatedProperties", OBJECT, build_props, methodcaller("items"),
        "unexpected property {!r} (unevaluatedProperties is false)",
    )


def kw_unevaluated_items(env: Env, value: Any) -> Optional[Check]:
    return _unevaluated(
        env, value, "unevaluatedItems", ARRAY, build_items, enumerate,
        "unexpected item at index {} (unevaluatedItems is false)",
    )
