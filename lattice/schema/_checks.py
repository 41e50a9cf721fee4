"""Compiled keywords (``Check``) and how a schema's checks become its two entry points.

A ``Check`` is one keyword compiled: the instance kind it applies to, its fast ``ok`` and
its ``errs`` (see ``_compiler`` for both signatures). ``build_ok`` groups a schema's
checks by instance kind, so one ``type(x)`` lookup picks those to run; ``build_errs``
runs them all, a failed ``type`` hiding the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

from ._errors import ErrorDetail, PathItem
from ._json import JSON_TYPES, KIND_TYPES, OBJECT, canonical_type

__all__ = [
    "Check", "ErrsFn", "OkFn", "Path", "Rule", "build_errs", "build_ok", "every", "false_ok",
    "leaf", "no_errors", "true_ok", "when_present",
]

OkFn = Callable[[Any], bool]
Path = tuple[PathItem, ...]
# errs(instance, path in the instance, path in the schema, out)
ErrsFn = Callable[[Any, Path, Path, "list[ErrorDetail]"], None]
Rule = tuple[str, OkFn, ErrsFn]


def true_ok(x: Any) -> bool:
    return True


def false_ok(x: Any) -> bool:
    return False


def no_errors(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
    return None


class Check:
    """One compiled keyword: the instance kind it applies to (``None``: any) and its paths."""

    __slots__ = ("kind", "ok", "errs", "keyword")

    def __init__(self, kind: Optional[str], ok: OkFn, errs: ErrsFn, keyword: str = "") -> None:
        self.kind = kind
        self.ok = ok
        self.errs = errs
        self.keyword = keyword


def leaf(kind: Optional[str], keyword: str, ok: OkFn, message: Callable[[Any], str]) -> Check:
    """A keyword with no subschemas: one error, at the instance itself, when ``ok`` fails."""

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        if not ok(x):
            out.append(ErrorDetail(path, message(x), keyword, (*spath, keyword)))

    return Check(kind, ok, errs, keyword)


def when_present(rules: Sequence[Rule], keyword: str) -> Check:
    """Object checks ``(key, ok, errs)`` that apply only when ``key`` is a member
    (``dependentRequired``, ``dependentSchemas``, ``dependencies``); ``errs`` is told the
    schema path ``keyword/key``."""
    pairs = tuple(rules)

    def ok(x: Any) -> bool:
        for key, f, _ in pairs:
            if key in x and not f(x):
                return False
        return True

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for key, _, f in pairs:
            if key in x:
                f(x, path, (*spath, keyword, key), out)

    return Check(OBJECT, ok, errs, keyword)


# -- dispatch ---------------------------------------------------------------------------


def _kind_table(checks: list[Check], attr: str) -> dict[type, tuple[Any, ...]]:
    table: dict[type, tuple[Any, ...]] = {t: () for t in JSON_TYPES}
    for kind, types in KIND_TYPES.items():
        fns = tuple(getattr(c, attr) for c in checks if c.kind == kind)
        for t in types:
            table[t] = fns
    return table


def every(fns: tuple[OkFn, ...]) -> OkFn:
    """One ``ok`` that holds when all of ``fns`` hold (the fewest calls for few of them)."""
    if not fns:
        return true_ok
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        a, b = fns
        return lambda x: a(x) and b(x)

    def ok(x: Any) -> bool:
        for f in fns:
            if not f(x):
                return False
        return True

    return ok


def build_ok(checks: list[Check]) -> OkFn:
    """The fast path of a schema object: any-kind checks, then those for ``type(x)``."""
    anys = every(tuple(c.ok for c in checks if c.kind is None))
    typed = [c for c in checks if c.kind is not None]
    if not typed:
        return anys
    table = {t: every(fns) for t, fns in _kind_table(typed, "ok").items()}
    get = table.get

    def slow(x: Any) -> bool:
        return table.get(canonical_type(x) or type(None), true_ok)(x)

    kinds = {c.kind for c in typed}
    if len(kinds) == 1 and anys is true_ok:
        types = KIND_TYPES[kinds.pop()]  # type: ignore[index]
        f = table[types[0]]
        if len(types) == 1:
            t0 = types[0]

            def ok1(x: Any) -> bool:
                t = type(x)
                if t is t0:
                    return f(x)
                return t in JSON_TYPES or slow(x)

            return ok1

        def ok2(x: Any) -> bool:
            t = type(x)
            if t is int or t is float:
                return f(x)
            return t in JSON_TYPES or slow(x)

        return ok2

    def ok(x: Any) -> bool:
        if not anys(x):
            return False
        fn = get(type(x))
        return fn(x) if fn is not None else slow(x)

    return ok


def build_errs(checks: list[Check]) -> ErrsFn:
    """The error-collecting path; a failed ``type`` hides the rest (they would be noise)."""
    type_checks = [c for c in checks if c.keyword == "type"]
    anys = tuple(c.errs for c in checks if c.kind is None and c.keyword != "type")
    table = _kind_table([c for c in checks if c.kind is not None], "errs")

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for tc in type_checks:
            before = len(out)
            tc.errs(x, path, spath, out)  # a leaf: one error exactly when its ok() fails
            if len(out) > before:
                return
        for f in anys:
            f(x, path, spath, out)
        fns = table.get(type(x))
        if fns is None:
            fns = table.get(canonical_type(x) or type(None), ())
        for f in fns:
            f(x, path, spath, out)

    return errs
