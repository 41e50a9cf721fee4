"""In-place applicators: ``$ref``, ``$dynamicRef``, ``allOf``/``anyOf``/``oneOf``, ``not``,
``if``/``then``/``else`` and ``dependentSchemas``: subschemas applied to the instance itself.

Same shape as ``_keywords``: ``(env, value) -> Check | None``. When no branch of
``anyOf``/``oneOf`` matches, ``alternatives_error`` turns the branches' errors into what a
reader can act on: merged type expectations, the one branch whose shape fits, or a
summary per option.
"""

from __future__ import annotations

from typing import Any, Optional

from ._checks import Check, Path, Rule, every, when_present
from ._compiler import Env, Node
from ._errors import ErrorDetail, format_path
from ._json import short_json

# Errors that say "this branch is about a different shape": a wrong type or a false schema
# at the instance itself, or a mismatched constant (a discriminator) on it or a member.
_WRONG_SHAPE = ("type", "false")
_WRONG_TAG = ("const", "enum")

__all__ = [
    "alternatives_error", "dependent_schema_rules", "kw_all_of", "kw_any_of", "kw_defs",
    "kw_definitions", "kw_dependent_schemas", "kw_dynamic_ref", "kw_if", "kw_not", "kw_one_of",
    "kw_ref", "schema_list", "schema_map",
]


def schema_list(env: Env, value: Any, keyword: str) -> list[Node]:
    if not isinstance(value, list) or not value:
        raise env.error(f"expected a non-empty array of schemas, got {short_json(value)}", keyword)
    return [env.sub(v, keyword, i) for i, v in enumerate(value)]


def schema_map(env: Env, value: Any, keyword: str) -> dict[str, Node]:
    if not isinstance(value, dict):
        raise env.error(f"expected an object of schemas, got {short_json(value)}", keyword)
    return {k: env.sub(v, keyword, k) for k, v in value.items()}


# -- references -------------------------------------------------------------------------


def _follow(target: Node, keyword: str) -> Check:
    """The referenced schema's checks, with ``keyword`` on the schema path (as JSON Schema's
    ``keywordLocation`` has it)."""
    errs_of = target.call_errs()

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        errs_of(x, path, (*spath, keyword), out)

    return Check(None, target.call_ok(), errs, keyword)


def kw_ref(env: Env, value: Any) -> Check:
    return _follow(env.ref(value, "$ref"), "$ref")


def kw_dynamic_ref(env: Env, value: Any) -> Check:
    return _follow(env.ref(value, "$dynamicRef", dynamic=True), "$dynamicRef")


# -- in-place combinators ---------------------------------------------------------------


def kw_all_of(env: Env, value: Any) -> Check:
    nodes = schema_list(env, value, "allOf")
    errs_fns = [n.call_errs() for n in nodes]

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for i, f in enumerate(errs_fns):
            f(x, path, (*spath, "allOf", i), out)

    return Check(None, every(tuple(n.call_ok() for n in nodes)), errs, "allOf")


def _branch_errors(nodes: list[Node], x: Any, path: Path, spath: Path,
                   keyword: str) -> list[list[ErrorDetail]]:
    found = []
    for i, n in enumerate(nodes):
        out: list[ErrorDetail] = []
        n.errs(x, path, (*spath, keyword, i), out)
        found.append(out)
    return found


def alternatives_error(nodes: list[Node], x: Any, path: Path, spath: Path,
                       keyword: str) -> list[ErrorDetail]:
    """Why no branch matched, said as simply as the branches allow."""
    per_branch = _branch_errors(nodes, x, path, spath, keyword)
    here_in_schema = (*spath, keyword)
    # Only type mismatches at this very place: "expected string or null, got integer 3".
    here = list(path)
    if all(len(es) == 1 and es[0].keyword == "type" and es[0].path == here for es in per_branch):
        wanted = [es[0].message.split(", got ")[0][len("expected "):] for es in per_branch]
        got = per_branch[0][0].message.split(", got ", 1)[1]
        message = f"expected {' or '.join(wanted)}, got {got}"
        return [ErrorDetail(path, message, keyword, here_in_schema)]
    # A branch whose shape fits (right types, matching consts) is what was meant: show its errors.
    depth = len(path)

    def wrong_shape(e: ErrorDetail) -> bool:
        return (e.keyword in _WRONG_SHAPE and len(e.path) == depth) or (
            e.keyword in _WRONG_TAG and len(e.path) <= depth + 1
        )

    fitting = [
        es for es in per_branch
        if not any(wrong_shape(e) for e in es)
    ]
    if len(fitting) == 1 and fitting[0]:
        return fitting[0]
    parts = []
    for i, es in enumerate(per_branch, 1):
        text = "; ".join(
            (e.message if e.path == here else f"{format_path(e.path)}: {e.message}") for e in es[:4]
        )
        parts.append(f"option {i}: {text or 'no match'}")
    message = f"must match one of the {keyword} options, but matches none ({' | '.join(parts)})"
    return [ErrorDetail(path, message, keyword, here_in_schema)]


def kw_any_of(env: Env, value: Any) -> Check:
    nodes = schema_list(env, value, "anyOf")
    oks = tuple(n.call_ok() for n in nodes)

    def ok(x: Any) -> bool:
        for f in oks:
            if f(x):
                return True
        return False

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        if not ok(x):
            out.extend(alternatives_error(nodes, x, path, spath, "anyOf"))

    return Check(None, ok, errs, "anyOf")


def kw_one_of(env: Env, value: Any) -> Check:
    nodes = schema_list(env, value, "oneOf")
    oks = tuple(n.call_ok() for n in nodes)

    def ok(x: Any) -> bool:
        seen = False
        for f in oks:
            if f(x):
                if seen:
                    return False
                seen = True
        return seen

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        matches = [i for i, f in enumerate(oks, 1) if f(x)]
        if not matches:
            out.extend(alternatives_error(nodes, x, path, spath, "oneOf"))
        elif len(matches) > 1:
            listed = ", ".join(map(str, matches))
            message = f"must match exactly one of the oneOf options, but matches options {listed}"
            out.append(ErrorDetail(path, message, "oneOf", (*spath, "oneOf")))

    return Check(None, ok, errs, "oneOf")


def kw_not(env: Env, value: Any) -> Check:
    f = env.sub(value, "not").call_ok()
    message = f"must not match the schema {short_json(value, 80)}"

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        if f(x):
            out.append(ErrorDetail(path, message, "not", (*spath, "not")))

    return Check(None, lambda x: not f(x), errs, "not")


def kw_if(env: Env, value: Any) -> Optional[Check]:
    schema = env.schema
    cond_node = env.sub(value, "if")  # compiled even alone: unevaluated* may read it
    if "then" not in schema and "else" not in schema:
        return None
    cond = cond_node.call_ok()
    then = env.sub(schema.get("then", True), "then")
    other = env.sub(schema.get("else", True), "else")
    then_ok, else_ok = then.call_ok(), other.call_ok()
    then_errs, else_errs = then.call_errs(), other.call_errs()

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        if cond(x):
            then_errs(x, path, (*spath, "then"), out)
        else:
            else_errs(x, path, (*spath, "else"), out)

    return Check(None, lambda x: then_ok(x) if cond(x) else else_ok(x), errs, "if")


def dependent_schema_rules(nodes: dict[str, Node]) -> list[Rule]:
    """``when_present`` rules: if ``key`` is a member, the object must match its node."""
    return [(k, n.call_ok(), n.call_errs()) for k, n in nodes.items()]


def kw_dependent_schemas(env: Env, value: Any) -> Check:
    nodes = schema_map(env, value, "dependentSchemas")
    return when_present(dependent_schema_rules(nodes), "dependentSchemas")


def kw_defs(env: Env, value: Any) -> None:
    """``$defs`` validates nothing, but a broken entry is a schema error even if unused."""
    schema_map(env, value, "$defs")


def kw_definitions(env: Env, value: Any) -> None:
    schema_map(env, value, "definitions")
