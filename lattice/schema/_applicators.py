"""Applicators for the parts of an instance: object members and array items.

Same shape as ``_keywords``: ``(env, value) -> Check | None``. Each returns a fast ``ok``
that short-circuits and an ``errs`` that visits every part, extending the instance path
with the property name or item index, and the schema path with the keyword (and the
property name or position of the subschema). Array-form ``items`` (draft 7, accepted by
2020-12 too) is here with the schema form.
"""

from __future__ import annotations

import sys
from itertools import islice
from typing import Any, Callable, Optional

from ._checks import Check, Path, every
from ._combinators import schema_list, schema_map
from ._compiler import Env, Node
from ._errors import ErrorDetail
from ._json import ARRAY, OBJECT, short_json
from ._keywords import non_negative
from ._regex import RegexError, compile_pattern

__all__ = [
    "kw_additional_properties", "kw_contains", "kw_items", "kw_pattern_properties",
    "kw_prefix_items", "kw_properties", "kw_property_names", "part_errors", "pattern_searches",
    "positional_check", "rest_items_check",
]

Search = Callable[[str], Any]
PartErrs = Callable[[Any, Any, Path, Path, "list[ErrorDetail]"], None]


def pattern_searches(env: Env, patterns: Any) -> tuple[int, list[Search], list[Search]]:
    """``(cap, fast, safe)`` for ``patternProperties``: ``fast`` are ``re``'s own searches,
    exact and quick on names up to ``cap`` characters; ``safe`` the bounded ones, for any."""
    if not isinstance(patterns, dict):
        return sys.maxsize, [], []
    try:
        compiled = [compile_pattern(p) for p in patterns]
    except RegexError as exc:
        raise env.error(str(exc), "patternProperties") from None
    cap = min((c.limit for c in compiled), default=sys.maxsize)
    return cap, [c.raw for c in compiled], [c.search for c in compiled]


def part_errors(node: Node, keyword: str, unexpected: Callable[[Any], str]) -> PartErrs:
    """``errs(key, value, path, spath, out)`` for one member/item that ``node`` (the value
    of ``keyword``) applies to: when ``node`` is ``false``, one error ``unexpected(key)`` at
    the container; else its errors."""
    if node.is_false:

        def reject(key: Any, value: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
            out.append(ErrorDetail(path, unexpected(key), keyword, (*spath, keyword)))

        return reject

    def descend(key: Any, value: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        node.errs(value, (*path, key), (*spath, keyword), out)

    return descend


# -- objects ----------------------------------------------------------------------------


def kw_properties(env: Env, value: Any) -> Optional[Check]:
    nodes = schema_map(env, value, "properties")
    pairs = tuple((k, n.call_ok()) for k, n in nodes.items() if n.schema is not True)
    if not pairs:
        return None
    if len(pairs) == 1:
        ((key, f),) = pairs
        ok: Callable[[Any], bool] = lambda x: key not in x or f(x[key])  # noqa: E731
    else:

        def ok(x: Any) -> bool:
            for k, f in pairs:
                if k in x and not f(x[k]):
                    return False
            return True

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for k, n in nodes.items():
            if k in x:
                n.errs(x[k], (*path, k), (*spath, "properties", k), out)

    return Check(OBJECT, ok, errs, "properties")


def kw_pattern_properties(env: Env, value: Any) -> Check:
    nodes = schema_map(env, value, "patternProperties")
    cap, fast, searches = pattern_searches(env, value)
    oks = [n.call_ok() for n in nodes.values()]
    fast_rules, safe_rules = tuple(zip(fast, oks)), tuple(zip(searches, oks))

    def ok(x: Any) -> bool:
        for k, v in x.items():
            for search, f in fast_rules if len(k) <= cap else safe_rules:
                if search(k) and not f(v):
                    return False
        return True

    searched = tuple(zip(searches, nodes.items()))

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for k, v in x.items():
            for search, (pattern, n) in searched:
                if search(k):
                    n.errs(v, (*path, k), (*spath, "patternProperties", pattern), out)

    return Check(OBJECT, ok, errs, "patternProperties")


def _allowed_names(known: Any, patterns: Any) -> str:
    names = [str(k) for k in known][:20]
    if isinstance(patterns, dict):
        names += [f"names matching {short_json(p)}" for p in patterns]
    return ", ".join(names) if names else "none"


def kw_additional_properties(env: Env, value: Any) -> Check:
    props = env.schema.get("properties")
    known = frozenset(props) if isinstance(props, dict) else frozenset()
    cap, fast, searches = pattern_searches(env, env.schema.get("patternProperties"))
    node = env.sub(value, "additionalProperties")
    f = node.call_ok()

    def extra(k: str) -> bool:
        return k not in known and not any(s(k) for s in (fast if len(k) <= cap else searches))

    if node.is_false and not searches:
        ok: Callable[[Any], bool] = known.issuperset
    elif node.is_false:
        ok = lambda x: not any(extra(k) for k in x)  # noqa: E731
    else:
        ok = lambda x: all(f(v) for k, v in x.items() if extra(k))  # noqa: E731
    names = props if isinstance(props, dict) else ()
    allowed = _allowed_names(names, env.schema.get("patternProperties"))
    part = part_errors(
        node, "additionalProperties", lambda k: f"unexpected property {k!r} (allowed: {allowed})"
    )

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for k, v in x.items():
            if extra(k):
                part(k, v, path, spath, out)

    return Check(OBJECT, ok, errs, "additionalProperties")


def kw_property_names(env: Env, value: Any) -> Check:
    node = env.sub(value, "propertyNames")
    f = node.call_ok()

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for k in x:
            found: list[ErrorDetail] = []
            node.errs(k, (), (*spath, "propertyNames"), found)
            for e in found:
                message = f"property name {k!r} is invalid: {e.message}"
                out.append(ErrorDetail(path, message, "propertyNames", e.schema_path))

    return Check(OBJECT, lambda x: all(f(k) for k in x), errs, "propertyNames")


# -- arrays -----------------------------------------------------------------------------


def kw_prefix_items(env: Env, value: Any) -> Check:
    return positional_check(schema_list(env, value, "prefixItems"), "prefixItems")


def positional_check(nodes: list[Node], keyword: str) -> Check:
    """Item ``i`` must match ``nodes[i]`` (``prefixItems``, draft-07 array ``items``)."""
    oks = tuple(n.call_ok() for n in nodes)

    def ok(x: Any) -> bool:
        for f, v in zip(oks, x):
            if not f(v):
                return False
        return True

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for i, (n, v) in enumerate(zip(nodes, x)):
            n.errs(v, (*path, i), (*spath, keyword, i), out)

    return Check(ARRAY, ok, errs, keyword)


def rest_items_check(node: Node, start: int, keyword: str) -> Check:
    """``node`` applied to every item from index ``start`` on (``items``/``additionalItems``)."""
    f = node.call_ok()
    if node.is_false:
        ok: Callable[[Any], bool] = lambda x: len(x) <= start  # noqa: E731
    elif start:
        ok = lambda x: all(f(v) for v in islice(x, start, None))  # noqa: E731
    else:

        def ok(x: Any) -> bool:
            for v in x:
                if not f(v):
                    return False
            return True

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        here = (*spath, keyword)
        if node.is_false and len(x) > start:
            message = f"must have at most {start} items (got {len(x)}); extra items are not allowed"
            out.append(ErrorDetail(path, message, keyword, here))
            return
        for i in range(start, len(x)):
            node.errs(x[i], (*path, i), here, out)

    return Check(ARRAY, ok, errs, keyword)


def kw_items(env: Env, value: Any) -> Check:
    """A schema: every item after ``prefixItems`` (draft 7 has none). An array (the draft-7
    form, accepted by 2020-12 too): item ``i`` by ``value[i]``, the rest by
    ``additionalItems`` when given."""
    if not isinstance(value, list):
        prefix = env.schema.get("prefixItems") if env.draft != "7" else None
        start = len(prefix) if isinstance(prefix, list) else 0
        return rest_items_check(env.sub(value, "items"), start, "items")
    positional = positional_check([env.sub(v, "items", i) for i, v in enumerate(value)], "items")
    extra = env.schema.get("additionalItems")
    if extra is None:
        return positional
    rest = rest_items_check(env.sub(extra, "additionalItems"), len(value), "additionalItems")

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        positional.errs(x, path, spath, out)
        rest.errs(x, path, spath, out)

    return Check(ARRAY, every((positional.ok, rest.ok)), errs, "items")


def kw_contains(env: Env, value: Any) -> Optional[Check]:
    f = env.sub(value, "contains").call_ok()
    lo, hi = 1, None
    if env.draft != "7":
        if "minContains" in env.schema:
            lo = non_negative(env, env.schema["minContains"], "minContains")
        if "maxContains" in env.schema:
            hi = non_negative(env, env.schema["maxContains"], "maxContains")
    if lo == 1 and hi is None:
        ok: Callable[[Any], bool] = lambda x: any(f(v) for v in x)  # noqa: E731
    else:

        def ok(x: Any) -> bool:
            n = sum(1 for v in x if f(v))
            return lo <= n and (hi is None or n <= hi)

    text = short_json(value, 80)

    too_few = "minContains" if env.draft != "7" and "minContains" in env.schema else "contains"

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        n = sum(1 for v in x if f(v))
        if n < lo:
            message = f"must contain at least {lo} item(s) matching {text} (found {n})"
            out.append(ErrorDetail(path, message, "contains", (*spath, too_few)))
        elif hi is not None and n > hi:
            message = f"must contain at most {hi} item(s) matching {text} (found {n})"
            out.append(ErrorDetail(path, message, "maxContains", (*spath, "maxContains")))

    return Check(ARRAY, ok, errs, "contains")
