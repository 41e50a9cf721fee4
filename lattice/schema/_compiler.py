"""Schemas compiled into closures, once.

Every (sub)schema becomes a ``Node`` with two entry points built from its keywords:

* ``ok(x) -> bool``: the fast path. No error objects, no paths; each keyword is a closure
  specialised at compile time, and keywords are grouped by the instance kind they apply
  to so that one ``type(x)`` lookup picks the checks to run.
* ``errs(x, path, out)``: the slow path, run only once ``ok`` said no (or by ``validate``),
  appending every ``ErrorDetail`` it finds.

``props``/``items`` (what a schema "evaluated", for ``unevaluated*``) are built lazily on
first use, so schemas that never use those keywords never pay for tracking them.

``$dynamicRef`` is resolved at compile time: a node is compiled once per dynamic scope
(``DynScope``, the outermost ``$dynamicAnchor`` of each name among the resources entered
on the way to it), so the check at run time is a plain call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

from ..errors import SchemaError
from ._errors import ErrorDetail, PathItem, schema_error
from ._json import JSON_TYPES, KIND_TYPES, OBJECT, canonical_type, short_json
from ._registry import Loc, Registry

__all__ = ["Check", "Compiler", "DynScope", "Env", "Node", "Rule", "leaf", "when_present"]

OkFn = Callable[[Any], bool]
Path = tuple[PathItem, ...]
ErrsFn = Callable[[Any, Path, "list[ErrorDetail]"], None]
Evaluated = Union[bool, "set[Any]", "frozenset[Any]"]
KeywordFn = Callable[["Env", Any], Optional["Check"]]
Rule = tuple[str, OkFn, ErrsFn]


# Keywords whose subschemas apply to the instance itself rather than to a part of it.
_IN_PLACE = frozenset({
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies",
    "$ref", "$dynamicRef",
})


def _true(x: Any) -> bool:
    return True


def _false(x: Any) -> bool:
    return False


def _no_errors(x: Any, path: Path, out: list[ErrorDetail]) -> None:
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

    def errs(x: Any, path: Path, out: list[ErrorDetail]) -> None:
        if not ok(x):
            out.append(ErrorDetail(path, message(x), keyword))

    return Check(kind, ok, errs, keyword)


def when_present(rules: Sequence[Rule], keyword: str) -> Check:
    """Object checks ``(key, ok, errs)`` that apply only when ``key`` is a member
    (``dependentRequired``, ``dependentSchemas``, ``dependencies``)."""
    pairs = tuple(rules)

    def ok(x: Any) -> bool:
        for key, f, _ in pairs:
            if key in x and not f(x):
                return False
        return True

    def errs(x: Any, path: Path, out: list[ErrorDetail]) -> None:
        for key, _, f in pairs:
            if key in x:
                f(x, path, out)

    return Check(OBJECT, ok, errs, keyword)


class DynScope:
    """The ``$dynamicAnchor`` bindings in effect: for each name, the outermost one entered."""

    __slots__ = ("bindings", "key")

    def __init__(self, bindings: dict[str, Loc]) -> None:
        self.bindings = bindings
        self.key = tuple(sorted((name, id(loc.schema)) for name, loc in bindings.items()))

    def enter(self, registry: Registry, resource: str) -> DynScope:
        anchors = registry.dynamic.get(resource)
        if not anchors:
            return self
        new = {n: loc for n, loc in anchors.items() if n not in self.bindings}
        return DynScope({**self.bindings, **new}) if new else self


class Node:
    """A compiled schema (see the module docstring for its four entry points)."""

    __slots__ = ("schema", "base", "draft", "dyn", "where", "compiler", "done", "is_false",
                 "ok", "errs", "props", "items")

    def __init__(self, compiler: Compiler, loc: Loc, dyn: DynScope, where: str) -> None:
        self.compiler = compiler
        self.schema, self.base, self.draft = loc
        self.dyn = dyn
        self.where = where
        self.done = False
        self.is_false = loc.schema is False
        self.ok: OkFn = _true
        self.errs: ErrsFn = _no_errors
        self.props: Callable[[Any], Evaluated] = self._lazy_props
        self.items: Callable[[Any], Evaluated] = self._lazy_items

    def _lazy_props(self, x: Any) -> Evaluated:
        from ._unevaluated import build_props  # only schemas using unevaluated* get here

        self.props = build_props(self)
        return self.props(x)

    def _lazy_items(self, x: Any) -> Evaluated:
        from ._unevaluated import build_items

        self.items = build_items(self)
        return self.items(x)

    def call_ok(self) -> OkFn:
        """``ok`` itself once compiled; an indirection while this node is still compiling."""
        if self.done:
            return self.ok
        return lambda x: self.ok(x)

    def call_errs(self) -> ErrsFn:
        if self.done:
            return self.errs
        return lambda x, path, out: self.errs(x, path, out)


class Env:
    """What a keyword function sees: its schema object, where it is, and how to compile more."""

    __slots__ = ("compiler", "node", "schema")

    def __init__(self, compiler: Compiler, node: Node) -> None:
        self.compiler = compiler
        self.node = node
        self.schema: dict[str, Any] = node.schema

    @property
    def draft(self) -> str:
        return self.node.draft

    @property
    def format_checker(self) -> bool:
        return self.compiler.format_checker

    def location(self, *segments: Union[str, int]) -> str:
        tail = "".join(f"/{str(s).replace('~', '~0').replace('/', '~1')}" for s in segments)
        return self.node.where + tail

    def error(self, message: str, *segments: Union[str, int]) -> SchemaError:
        return self.compiler.error(self.location(*segments), message)

    def sub(self, value: Any, *segments: Union[str, int]) -> Node:
        """Compile a subschema found at ``segments`` below this schema."""
        n = self.node
        loc = Loc(value, *self.compiler.registry.info.get(id(value), (n.base, n.draft)))
        in_place = bool(segments) and segments[0] in _IN_PLACE
        return self.compiler.node(loc, n.dyn, self.location(*segments), in_place)

    def ref(self, reference: Any, keyword: str, *, dynamic: bool = False) -> Node:
        """Compile what a ``$ref``/``$dynamicRef`` value points at (static or dynamic)."""
        if not isinstance(reference, str):
            got = short_json(reference)
            raise self.error(f"expected a URI reference string, got {got}", keyword)
        from ._uri import resolve_uri, split_fragment

        uri = resolve_uri(self.node.base, reference)
        registry = self.compiler.registry
        try:
            loc = registry.resolve(uri)
        except (LookupError, ValueError) as exc:
            raise self.error(f"cannot resolve {reference!r}: {exc}", keyword) from None
        if dynamic:
            fragment = split_fragment(uri)[1]
            if fragment and not fragment.startswith("/"):
                if registry.is_dynamic_anchor(loc.base, fragment, loc.schema):
                    loc = self.node.dyn.bindings.get(fragment, loc)
        return self.compiler.node(loc, self.node.dyn, uri if "#" in uri else uri + "#", True)


class Compiler:
    """Turns schema documents into ``Node`` trees, compiling each (node, scope) once."""

    def __init__(self, registry: Registry, tables: dict[str, dict[str, KeywordFn]],
                 format_checker: bool) -> None:
        self.registry = registry
        self.tables = tables
        self.format_checker = format_checker
        self._cache: dict[tuple[int, str, str, tuple[Any, ...]], Node] = {}
        self._stack: list[tuple[Node, bool]] = []  # nodes being compiled, and how reached
        # Whether validation may recurse as deep as the instance goes (a reference cycle,
        # or a keyword that walks whole values): then the validator guards its stack.
        self.unbounded = False

    def error(self, where: str, reason: str) -> SchemaError:
        """``invalid schema at <where>: <reason>``, with ``.path`` and ``.reason`` set."""
        return schema_error(where, reason, self.registry.resources)

    def root(self, loc: Loc) -> Node:
        return self.node(loc, DynScope({}), "#")

    def node(self, loc: Loc, dyn: DynScope, where: str, in_place: bool = False) -> Node:
        """The compiled node for ``loc``; ``in_place`` when it applies to the same instance."""
        dyn = dyn.enter(self.registry, loc.base)
        key = (id(loc.schema), loc.base, loc.draft, dyn.key)
        node = self._cache.get(key)
        if node is not None:
            if not node.done:
                self.unbounded = True
                if in_place:
                    self._check_cycle(node, where)
            return node
        node = self._cache[key] = Node(self, loc, dyn, where)
        self._stack.append((node, in_place))
        try:
            self._build(node, where)
        finally:
            self._stack.pop()
        return node

    def _check_cycle(self, target: Node, where: str) -> None:
        # A reference back to a schema still being compiled is fine (recursion) unless every
        # step since then stayed on the same instance: that would loop forever at run time.
        for frame, edge_in_place in reversed(self._stack):
            if frame is target:
                here = self._stack[-1][0].where if self._stack else where
                raise self.error(here, f"it leads back to {target.where} without descending "
                                 "into the instance, so validation would never end")
            if not edge_in_place:
                return

    def _build(self, node: Node, where: str) -> None:
        schema = node.schema
        if schema is True or schema is False:
            node.ok = _true if schema else _false
            node.errs = _no_errors if schema else _false_errors
        elif isinstance(schema, dict):
            checks = self._keywords(node)
            node.ok = build_ok(checks)
            node.errs = build_errs(checks)
        else:
            raise self.error(
                where, f"a schema must be an object or a boolean, got {short_json(schema)}"
            )
        node.done = True

    def _keywords(self, node: Node) -> list[Check]:
        env = Env(self, node)
        table = self.tables[node.draft]
        schema = node.schema
        if node.draft == "7" and "$ref" in schema:
            names: Any = ("$ref",)  # draft 7: $ref replaces every sibling keyword
        else:
            names = [name for name in table if name in schema]
        checks = []
        for name in names:
            check = table[name](env, schema[name])
            if check is not None:
                checks.append(check)
        return checks


def _false_errors(x: Any, path: Path, out: list[ErrorDetail]) -> None:
    out.append(ErrorDetail(path, "no value is allowed here (the schema is false)", "false"))


# -- dispatch ---------------------------------------------------------------------------


def _kind_table(checks: list[Check], attr: str) -> dict[type, tuple[Any, ...]]:
    table: dict[type, tuple[Any, ...]] = {t: () for t in JSON_TYPES}
    for kind, types in KIND_TYPES.items():
        fns = tuple(getattr(c, attr) for c in checks if c.kind == kind)
        for t in types:
            table[t] = fns
    return table


def _all(fns: tuple[OkFn, ...]) -> OkFn:
    if not fns:
        return _true
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
    anys = _all(tuple(c.ok for c in checks if c.kind is None))
    typed = [c for c in checks if c.kind is not None]
    if not typed:
        return anys
    table = {t: _all(fns) for t, fns in _kind_table(typed, "ok").items()}
    get = table.get

    def slow(x: Any) -> bool:
        return table.get(canonical_type(x) or type(None), _true)(x)

    kinds = {c.kind for c in typed}
    if len(kinds) == 1 and anys is _true:
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

    def errs(x: Any, path: Path, out: list[ErrorDetail]) -> None:
        for tc in type_checks:
            before = len(out)
            tc.errs(x, path, out)  # a leaf: one error exactly when its ok() fails
            if len(out) > before:
                return
        for f in anys:
            f(x, path, out)
        fns = table.get(type(x))
        if fns is None:
            fns = table.get(canonical_type(x) or type(None), ())
        for f in fns:
            f(x, path, out)

    return errs
