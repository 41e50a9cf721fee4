"""JSON Schema from Python type hints, for tool inputs and structured output.

Named types (dataclasses, TypedDicts, Enums) become ``$defs`` entries referenced as
``#/$defs/Name``, which makes recursive types work; the top-level type of
``schema_from_type`` is inlined so the result is an object schema where it can be. Every
output is plain JSON that the Anthropic tools API accepts and ``lattice.schema`` validates.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import enum
import functools
import inspect
import json
import types
import typing
from typing import Any, Callable, Optional, Union

from ..errors import SchemaError
from ._docstrings import parse_docstring
from ._hints import class_hints

__all__ = ["schema_from_type", "schema_from_function"]

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    type(None): {"type": "null"},
    None: {"type": "null"},
}
_ARRAYS = {list, cabc.Sequence, cabc.MutableSequence, cabc.Iterable, cabc.Collection}
_SETS = {set, frozenset, cabc.Set, cabc.MutableSet}
_MAPPINGS = {dict, cabc.Mapping, cabc.MutableMapping}
# ``X | Y`` (3.10+) has its own origin, ``types.UnionType``.
_UNION_TYPES: tuple[Any, ...] = (Union, getattr(types, "UnionType", Union))


@functools.cache
def _typing_attr(name: str) -> tuple[Any, ...]:
    """The object(s) named ``name`` in typing and typing_extensions (when installed)."""
    found = [getattr(typing, name)] if hasattr(typing, name) else []
    try:
        import typing_extensions
    except ImportError:  # pragma: no cover - optional
        return tuple(found)
    extra = getattr(typing_extensions, name, None)
    return tuple(found + ([extra] if extra is not None and extra not in found else []))


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def _json_default(value: Any) -> tuple[bool, Any]:
    """(ok, value) for a default worth recording: JSON-serialisable, enum members unwrapped."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


class _Builder:
    """Builds one schema; collects the ``$defs`` its named types need."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._names: dict[Any, str] = {}

    def build(self, tp: Any, where: str) -> dict[str, Any]:
        if (tp is None or isinstance(tp, type)) and tp in _SCALARS:  # Annotated may not hash
            return dict(_SCALARS[tp])
        if tp is Any or tp is object:
            return {}
        if isinstance(tp, (str, typing.ForwardRef)):
            raise SchemaError(f"{where}: cannot resolve the forward reference {tp!r}")
        if isinstance(tp, typing.TypeVar):
            return self.build(tp.__bound__, where) if tp.__bound__ is not None else {}
        if hasattr(tp, "__supertype__"):
            return self.build(tp.__supertype__, where)  # NewType
        if tp is typing.Tuple:  # bare, unlike Tuple[()] which is the empty tuple
            return {"type": "array"}
        origin = typing.get_origin(tp)
        if origin is not None:
            return self._generic(tp, origin, typing.get_args(tp), where)
        if isinstance(tp, type):
            if issubclass(tp, enum.Enum) or dataclasses.is_dataclass(tp) or _is_typeddict(tp):
                return self._named(tp, where)
            if tp in _ARRAYS or tp is tuple:
                return {"type": "array"}
            if tp in _SETS:
                return {"type": "array", "uniqueItems": True}
            if tp in _MAPPINGS:
                return {"type": "object"}
        raise SchemaError(f"{where}: unsupported type {getattr(tp, '__qualname__', tp)!r} "
                          "(use a primitive, list, dict, Literal, Enum, dataclass or TypedDict)")

    def _generic(self, tp: Any, origin: Any, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        if origin in _typing_attr("Annotated"):
            schema = self.build(args[0], where)
            for meta in args[1:]:
                if isinstance(meta, str):
                    schema["description"] = meta
                elif isinstance(meta, dict):
                    schema.update(meta)
            return schema
        if origin in _typing_attr("Required") + _typing_attr("NotRequired"):
            return self.build(args[0], where)
        if origin in _UNION_TYPES:
            return self._union(args, where)
        if origin in _typing_attr("Literal"):
            return _literal(args, where)
        if origin in _ARRAYS:
            if not args:
                return {"type": "array"}
            return {"type": "array", "items": self.build(args[0], where)}
        if origin in _SETS:
            items = {"items": self.build(args[0], where)} if args else {}
            return {"type": "array", "uniqueItems": True, **items}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.build(args[0], where)}
            if args == ((),):  # Tuple[()]
                args = ()
            prefix = [self.build(a, where) for a in args]
            n = len(prefix)
            fixed: dict[str, Any] = {"type": "array", "minItems": n, "maxItems": n}
            return {**fixed, "prefixItems": prefix} if prefix else fixed
        if origin in _MAPPINGS:
            if args and args[0] not in (str, Any):
                raise SchemaError(f"{where}: JSON object keys are strings, not {args[0]!r}")
            if not args:
                return {"type": "object"}
            return {"type": "object", "additionalProperties": self.build(args[1], where)}
        return self.build(origin, where)

    def _union(self, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        branches = [self.build(a, where) for a in args]
        if all(set(b) == {"type"} and isinstance(b["type"], str) for b in branches):
            names = list(dict.fromkeys(b["type"] for b in branches))
            if "number" in names and "integer" in names:
                names.remove("integer")  # every integer is a number already
            return {"type": names[0] if len(names) == 1 else names}
        return {"anyOf": branches}

    # -- named types ----------------------------------------------------------------------

    def _named(self, tp: type, where: str) -> dict[str, Any]:
        name = self._names.get(tp)
        if name is None:
            name = tp.__name__
            while name in self.defs:
                name += "_"
            self._names[tp] = name
            self.defs[name] = {}  # reserved first: recursive references find it
            self.defs[name] = self._define(tp, f"{where} -> {tp.__name__}")
        return {"$ref": f"#/$defs/{name}"}

    def _define(self, tp: type, where: str) -> dict[str, Any]:
        if issubclass(tp, enum.Enum):
            values = [m.value for m in tp]
            for value in values:
                if not _json_default(value)[0]:
                    raise SchemaError(f"{where}: enum value {value!r} is not JSON")
            return _with_doc(_enum_schema(values), tp)
        try:
            hints = class_hints(tp)
        except Exception as exc:  # NameError for unresolvable forward references, mostly
            message = f"{where}: cannot resolve the type hints of {tp.__name__}: {exc}"
            raise SchemaError(message) from None
        _, docs = parse_docstring(tp.__doc__ or "")
        if dataclasses.is_dataclass(tp):
            fields = [f for f in dataclasses.fields(tp) if f.init]
            missing = dataclasses.MISSING
            required = [f.name for f in fields
                        if f.default is missing and f.default_factory is missing]
            properties = {}
            for f in fields:
                prop = self.build(hints.get(f.name, Any), f"{where}.{f.name}")
                ok, default = _json_default(f.default)
                if f.default is not dataclasses.MISSING and ok:
                    prop["default"] = default
                text = f.metadata.get("description") or docs.get(f.name)
                if text and "description" not in prop:
                    prop["description"] = text
                properties[f.name] = prop
        else:
            total = getattr(tp, "__total__", True)
            required_keys = set(getattr(tp, "__required_keys__", hints if total else ()))
            properties, required = {}, []
            for key, hint in hints.items():
                origin = typing.get_origin(hint)
                if origin in _typing_attr("Required"):
                    required_keys.add(key)
                elif origin in _typing_attr("NotRequired"):
                    required_keys.discard(key)
                properties[key] = self.build(hint, f"{where}.{key}")
                if key in docs and "description" not in properties[key]:
                    properties[key]["description"] = docs[key]
            required = [k for k in hints if k in required_keys]
        schema = {"type": "object", "properties": properties, "required": required,
                  "additionalProperties": False}
        return _with_doc(schema, tp)


def _with_doc(schema: dict[str, Any], tp: type) -> dict[str, Any]:
    """Add the class docstring as ``description``, unless Python wrote it (or inherited it)."""
    doc = tp.__dict__.get("__doc__") or ""
    generated = (
        (dataclasses.is_dataclass(tp) and doc.startswith(f"{tp.__name__}("))
        or (issubclass(tp, enum.Enum) and doc in ("An enumeration.", enum.Enum.__doc__))
    )
    description = parse_docstring(doc)[0] if doc and not generated else ""
    if description:
        schema["description"] = description
    return schema


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    """``{"enum": values}``, with ``"type"`` too when every value has the same JSON type."""
    types = {_SCALARS[type(v)]["type"] if type(v) in _SCALARS else "" for v in values}
    if len(types) == 1 and "" not in types:
        return {"type": types.pop(), "enum": values}
    return {"enum": values}


def _literal(args: tuple[Any, ...], where: str) -> dict[str, Any]:
    values = []
    for arg in args:
        ok, value = _json_default(arg)
        if not ok:
            raise SchemaError(f"{where}: Literal value {arg!r} is not JSON")
        values.append(value)
    return _enum_schema(values)


def schema_from_type(tp: Any) -> dict[str, Any]:
    builder = _Builder()
    schema = builder.build(tp, "type")
    ref = schema.get("$ref", "")
    if set(schema) == {"$ref"} and ref.startswith("#/$defs/"):
        # Inline the top-level named type so the result is an object schema itself.
        name = ref[len("#/$defs/"):]
        schema = dict(builder.defs[name])
        if not any(f'"$ref": "{ref}"' in json.dumps(d) for d in builder.defs.values()):
            del builder.defs[name]
    if builder.defs:
        schema["$defs"] = builder.defs
    return schema


def _is_tool_context(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1] == "ToolContext"
    return getattr(annotation, "__name__", None) == "ToolContext"


def _skipped(annotation: Any, skip: Callable[[Any], bool]) -> bool:
    # Python 3.9 turns ``ctx: ToolContext = None`` into Optional[ToolContext]: look inside.
    if skip(annotation):
        return True
    if typing.get_origin(annotation) in _UNION_TYPES:
        return any(skip(a) for a in typing.get_args(annotation) if a is not type(None))
    return False


def _parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations; unresolvable ones stay strings (``skip`` may still match them)."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # a NameError from one annotation: resolve them one by one
        hints: dict[str, Any] = {}
        namespace = getattr(inspect.unwrap(fn), "__globals__", {})
        for name, ann in getattr(fn, "__annotations__", {}).items():
            try:
                # The same evaluation get_type_hints does, one annotation at a time.
                hints[name] = eval(ann, namespace) if isinstance(ann, str) else ann
            except Exception:
                hints[name] = ann
        return hints


def schema_from_function(
    fn: Callable[..., Any], *, skip: Optional[Callable[[Any], bool]] = None
) -> dict[str, Any]:
    skip = skip or _is_tool_context
    hints = _parameter_hints(fn)
    _, docs = parse_docstring(inspect.getdoc(fn))
    builder = _Builder()
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra_allowed = False
    parameters = list(inspect.signature(fn).parameters.values())
    for index, p in enumerate(parameters):
        if index == 0 and p.name in ("self", "cls"):
            continue
        if p.kind is p.VAR_KEYWORD:
            extra_allowed = True
            continue
        annotation = hints.get(p.name, p.annotation)
        if annotation is not p.empty and _skipped(annotation, skip):
            continue
        if p.kind is p.VAR_POSITIONAL:
            raise SchemaError(f"parameter *{p.name}: a tool is called with keyword arguments only")
        if p.kind is p.POSITIONAL_ONLY:
            raise SchemaError(
                f"parameter {p.name!r} is positional-only; tools take keyword arguments"
            )
        where = f"parameter {p.name!r}"
        prop = {} if annotation is p.empty else builder.build(annotation, where)
        if p.name in docs and "description" not in prop:
            prop["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        else:
            ok, default = _json_default(p.default)
            if ok:
                prop["default"] = default
        properties[p.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if not extra_allowed:
        schema["additionalProperties"] = False  # fn(**input) would reject unknown names
    if builder.defs:
        schema["$defs"] = builder.defs
    return schema
