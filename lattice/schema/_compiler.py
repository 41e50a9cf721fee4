"""Schemas compiled into closures, once.

Every (sub)schema becomes a ``Node`` with two entry points built from its keywords:

* ``ok(x) -> bool``: the fast path. No error objects, no paths; each keyword is a closure
  specialised at compile time, and keywords are grouped by the instance kind they apply
  to so that one ``type(x)`` lookup picks the checks to run.
* ``errs(x, path, spath, out)``: the slow path, run only once ``ok`` said no (or by
  ``validate``), appending every ``ErrorDetail`` it finds. ``path`` is where ``x`` is in
  the instance, ``spath`` the keywords and keys followed from the schema root to this
  schema (a node reached by two routes, or recursively, is compiled once, so it is told).

``props``/``items`` (what a schema "evaluated", for ``unevaluated*``) are built lazily on
first use, so schemas that never use those keywords never pay for tracking them. What a
keyword means comes from the ``Vocabulary`` the compiler is given (``_vocabulary.py``):
this module knows no keyword but the few that decide how subschemas are reached.

``$dynamicRef`` is resolved at compile time: a node is compiled once per dynamic scope
(``DynScope``, the outermost ``$dynamicAnchor`` of each name among the resources entered
on the way to it), so the check at run time is a plain call.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Union

from ..errors import SchemaError
from ._checks import Check, ErrsFn, OkFn, Path, build_errs, build_ok, false_ok, no_errors, true_ok
from ._errors import ErrorDetail, schema_error
from ._json import short_json
from ._registry import Loc, Registry
from ._uri import resolve_uri, split_fragment

__all__ = ["Compiler", "DynScope", "Env", "Evaluated", "KeywordFn", "Node", "Vocabulary"]

Evaluated = Union[bool, "set[Any]", "frozenset[Any]"]
KeywordFn = Callable[["Env", Any], Optional[Check]]


class Vocabulary(NamedTuple):
    """What the keywords mean: the table of each draft (keyword -> ``KeywordFn``, in
    evaluation order), and how a node tells what it evaluated (``props``/``items``, for
    ``unevaluated*``; built once per node, on first use)."""

    tables: dict[str, dict[str, KeywordFn]]
    props: Callable[[Node], Callable[[Any], Evaluated]]
    items: Callable[[Node], Callable[[Any], Evaluated]]


# Keywords whose subschemas apply to the instance itself rather than to a part of it.
_IN_PLACE = frozenset({
    "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies",
    "$ref", "$dynamicRef",
})


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
    """A compiled schema: ``ok``, ``errs``, ``props`` and ``items`` (see the module docstring)."""

    __slots__ = ("schema", "base", "draft", "dyn", "where", "compiler", "done", "is_false",
                 "ok", "errs", "props", "items")

    def __init__(self, compiler: Compiler, loc: Loc, dyn: DynScope, where: str) -> None:
        self.compiler = compiler
        self.schema, self.base, self.draft = loc
        self.dyn = dyn
        self.where = where
        self.done = False
        self.is_false = loc.schema is False
        self.ok: OkFn = true_ok
        self.errs: ErrsFn = no_errors
        self.props: Callable[[Any], Evaluated] = self._lazy_props
        self.items: Callable[[Any], Evaluated] = self._lazy_items

    def _lazy_props(self, x: Any) -> Evaluated:
        self.props = self.compiler.vocabulary.props(self)  # only unevaluated* get here
        return self.props(x)

    def _lazy_items(self, x: Any) -> Evaluated:
        self.items = self.compiler.vocabulary.items(self)
        return self.items(x)

    def call_ok(self) -> OkFn:
        """``ok`` itself once compiled; an indirection while this node is still compiling."""
        if self.done:
            return self.ok
        return lambda x: self.ok(x)

    def call_errs(self) -> ErrsFn:
        if self.done:
            return self.errs
        return lambda x, path, spath, out: self.errs(x, path, spath, out)


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
        return self.compiler.node(loc, n.dyn, self.location(*segments), in_place=in_place)

    def ref(self, reference: Any, keyword: str, *, dynamic: bool = False) -> Node:
        """Compile what a ``$ref``/``$dynamicRef`` value points at (static or dynamic)."""
        if not isinstance(reference, str):
            got = short_json(reference)
            raise self.error(f"expected a URI reference string, got {got}", keyword)
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
        where = uri if "#" in uri else uri + "#"
        return self.compiler.node(loc, self.node.dyn, where, in_place=True)


class Compiler:
    """Turns schema documents into ``Node`` trees, compiling each (node, scope) once."""

    def __init__(self, registry: Registry, vocabulary: Vocabulary, format_checker: bool) -> None:
        self.registry = registry
        self.vocabulary = vocabulary
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

    def node(self, loc: Loc, dyn: DynScope, where: str, *, in_place: bool = False) -> Node:
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
            node.ok = true_ok if schema else false_ok
            node.errs = no_errors if schema else _false_errors
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
        table = self.vocabulary.tables[node.draft]
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


def _false_errors(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
    out.append(ErrorDetail(path, "no value is allowed here (the schema is false)", "false", spath))
