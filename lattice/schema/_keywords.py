"""The validation vocabulary: keywords that look at one instance and hold no subschemas.

Their rows in the keyword table are in ``_vocabulary.py``.

Each function is ``(env, value) -> Check | None``: it checks the keyword's own value
(raising ``SchemaError`` naming its location), then returns closures specialised to that
value. The kind passed to ``leaf`` lets the compiler skip the type guard inside ``ok``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ._checks import Check, Path, Rule, leaf, when_present
from ._compiler import Env, KeywordFn
from ._errors import ErrorDetail
from ._json import (
    ARRAY,
    JSON_TYPES,
    NUMBER,
    OBJECT,
    STRING,
    canonical_type,
    describe,
    freeze,
    json_equal,
    short_json,
)
from ._regex import RegexError, compile_pattern

__all__ = [
    "dependent_required_rules", "kw_const", "kw_dependent_required", "kw_enum",
    "kw_exclusive_maximum", "kw_exclusive_minimum", "kw_format", "kw_maximum", "kw_minimum",
    "kw_multiple_of", "kw_pattern", "kw_required", "kw_type", "kw_unique_items", "max_size",
    "min_size", "non_negative",
]

_NAMED_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "object": frozenset({dict}),
    "array": frozenset({list}),
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
    "number": frozenset({int, float}),
    "integer": frozenset({int}),
}


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
    )


def _number(env: Env, value: Any, keyword: str) -> Any:
    if not _is_number(value):
        raise env.error(f"expected a number, got {short_json(value)}", keyword)
    return value


def non_negative(env: Env, value: Any, keyword: str) -> int:
    """``value`` as a count (``maxLength``, ``minContains``, ...): a non-negative integer."""
    if _is_number(value) and value >= 0 and float(value).is_integer():
        return int(value)
    raise env.error(f"expected a non-negative integer, got {short_json(value)}", keyword)


def _strings(env: Env, value: Any, keyword: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise env.error(f"expected an array of strings, got {short_json(value)}", keyword)
    return value


def _num(value: Any) -> str:
    return short_json(int(value) if isinstance(value, float) and value.is_integer() else value)


# -- any instance -----------------------------------------------------------------------


def kw_type(env: Env, value: Any) -> Check:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise env.error(f"expected a type name or a list of them, got {short_json(value)}", "type")
    for name in names:
        if name not in _NAMED_TYPES:
            known = ", ".join(_NAMED_TYPES)
            raise env.error(f"unknown type {short_json(name)} (known: {known})", "type")
    types = frozenset().union(*(_NAMED_TYPES[n] for n in names))
    loose_int = "integer" in names and "number" not in names  # 2.0 is an integer

    def slow(x: Any) -> bool:
        t = canonical_type(x)
        return t in types or (loose_int and t is float and x.is_integer())

    if len(types) == 1 and not loose_int:
        (t0,) = types

        def ok(x: Any) -> bool:
            t = type(x)
            return t is t0 or (t not in JSON_TYPES and slow(x))

    else:

        def ok(x: Any) -> bool:
            t = type(x)
            if t in types:
                return True
            if t is float:
                return loose_int and x.is_integer()
            return t not in JSON_TYPES and slow(x)

    wanted = " or ".join(names)
    return leaf(None, "type", ok, lambda x: f"expected {wanted}, got {describe(x)}")


def kw_enum(env: Env, value: Any) -> Check:
    if not isinstance(value, list):
        raise env.error(f"expected an array, got {short_json(value)}", "enum")
    # Hashable scalars are looked up per JSON type, so True never matches 1.
    strings = frozenset(v for v in value if type(v) is str)
    numbers = frozenset(v for v in value if type(v) in (int, float))
    bools = frozenset(v for v in value if type(v) is bool)
    has_null = None in value

    def slow(x: Any) -> bool:
        return any(json_equal(x, v) for v in value)

    if len(strings) == len(value):

        def ok(x: Any) -> bool:
            return x in strings if type(x) is str else type(x) not in JSON_TYPES and slow(x)

    else:

        def ok(x: Any) -> bool:
            t = type(x)
            if t is str:
                return x in strings
            if t is int or t is float:
                return x in numbers
            if t is bool:
                return x in bools
            return has_null if x is None else slow(x)

    allowed = ", ".join(short_json(v, 40) for v in value[:12])
    allowed += ", ..." if len(value) > 12 else ""
    return leaf(None, "enum", ok, lambda x: f"must be one of: {allowed} (got {describe(x)})")


def kw_const(env: Env, value: Any) -> Check:
    if type(value) is str:
        ok: Callable[[Any], bool] = lambda x: x == value and isinstance(x, str)  # noqa: E731
    else:
        ok = lambda x: json_equal(x, value)  # noqa: E731
    expected = short_json(value)
    return leaf(None, "const", ok, lambda x: f"must be exactly {expected} (got {describe(x)})")


# -- numbers ----------------------------------------------------------------------------


def kw_multiple_of(env: Env, value: Any) -> Check:
    if _number(env, value, "multipleOf") <= 0:
        raise env.error(f"expected a number greater than 0, got {short_json(value)}", "multipleOf")
    from fractions import Fraction  # here, not at import: most schemas never need it

    def exact(x: Any) -> Fraction:
        # From the shortest decimal text: 0.0075 is exactly 75/10000, a multiple of 0.0001.
        return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)

    step = exact(value)
    int_step = type(value) is int

    def ok(x: Any) -> bool:
        if int_step and type(x) is int:
            return not x % value
        try:
            return (exact(x) / step).denominator == 1
        except (ValueError, OverflowError):  # inf or nan
            return False

    return leaf(NUMBER, "multipleOf", ok,
                lambda x: f"must be a multiple of {_num(value)} (got {_num(x)})")


_RELATIONS = {"<=": "at most", "<": "less than", ">=": "at least", ">": "greater than"}


def _limit(keyword: str, op: str, value: Any) -> Check:
    """``x <op> value`` as a number check; one closure per operator keeps it a single call."""
    if op == "<=":
        ok: Callable[[Any], bool] = lambda x: x <= value  # noqa: E731
    elif op == "<":
        ok = lambda x: x < value  # noqa: E731
    elif op == ">=":
        ok = lambda x: x >= value  # noqa: E731
    else:
        ok = lambda x: x > value  # noqa: E731
    relation = f"{_RELATIONS[op]} {_num(value)}"
    return leaf(NUMBER, keyword, ok, lambda x: f"must be {relation} (got {_num(x)})")


def kw_maximum(env: Env, value: Any) -> Check:
    _number(env, value, "maximum")
    strict = env.schema.get("exclusiveMaximum") is True  # the draft-04 boolean form
    return _limit("maximum", "<" if strict else "<=", value)


def kw_minimum(env: Env, value: Any) -> Check:
    _number(env, value, "minimum")
    strict = env.schema.get("exclusiveMinimum") is True
    return _limit("minimum", ">" if strict else ">=", value)


def kw_exclusive_maximum(env: Env, value: Any) -> Optional[Check]:
    if isinstance(value, bool):
        return None  # draft-04 form, read by "maximum"
    return _limit("exclusiveMaximum", "<", _number(env, value, "exclusiveMaximum"))


def kw_exclusive_minimum(env: Env, value: Any) -> Optional[Check]:
    if isinstance(value, bool):
        return None
    return _limit("exclusiveMinimum", ">", _number(env, value, "exclusiveMinimum"))


# -- strings ----------------------------------------------------------------------------


def kw_pattern(env: Env, value: Any) -> Check:
    if not isinstance(value, str):
        raise env.error(f"expected a regular expression string, got {short_json(value)}", "pattern")
    try:
        compiled = compile_pattern(value)
    except RegexError as exc:
        raise env.error(str(exc), "pattern") from None
    wanted = short_json(value)

    def message(x: str) -> str:
        if compiled.refuses(x):
            return (f"is too long ({len(x)} characters) to be checked against the pattern "
                    f"{wanted} in bounded time (at most {compiled.limit})")
        return f"must match the pattern {wanted} (got {short_json(x)})"

    return leaf(STRING, "pattern", compiled.search, message)


def kw_format(env: Env, value: Any) -> Optional[Check]:
    if not isinstance(value, str):
        raise env.error(f"expected a format name, got {short_json(value)}", "format")
    if not env.format_checker:
        return None  # an annotation unless the caller asked for format assertion
    from ._formats import checker_for  # loaded only by format assertion: its tables are big

    check = checker_for(value)
    if check is None:
        return None  # unknown formats are annotations, as the spec asks
    return leaf(STRING, "format", check, lambda x: f"must be a valid {value} (got {short_json(x)})")


# -- arrays -----------------------------------------------------------------------------


def _unique(x: Any) -> bool:
    try:
        if all(type(v) is str for v in x):
            return len(set(x)) == len(x)
        return len({freeze(v) for v in x}) == len(x)
    except TypeError:  # an unhashable non-JSON value: compare pairwise
        return not any(json_equal(a, b) for i, a in enumerate(x) for b in x[i + 1:])


def kw_unique_items(env: Env, value: Any) -> Optional[Check]:
    if not isinstance(value, bool):
        raise env.error(f"expected true or false, got {short_json(value)}", "uniqueItems")
    if not value:
        return None
    env.compiler.unbounded = True  # items are compared whole, however deep they go

    def message(x: Any) -> str:
        for i, a in enumerate(x):
            for j in range(i):
                if json_equal(a, x[j]):
                    return f"items must be unique, but item {i} repeats item {j} ({short_json(a)})"
        return "items must be unique"  # pragma: no cover - only reached when ok() failed

    return leaf(ARRAY, "uniqueItems", _unique, message)


# -- objects ----------------------------------------------------------------------------


def max_size(keyword: str, kind: str, message: str) -> KeywordFn:
    """``len(x)`` at most the keyword's value (``maxLength``, ...); ``message`` takes the bound."""
    return _size_limit(keyword, kind, message, at_most=True)


def min_size(keyword: str, kind: str, message: str) -> KeywordFn:
    """``len(x)`` at least the keyword's value (``minItems``, ...)."""
    return _size_limit(keyword, kind, message, at_most=False)


def _size_limit(keyword: str, kind: str, message: str, *, at_most: bool) -> KeywordFn:

    def compile_size(env: Env, value: Any) -> Check:
        # len() of a str counts code points, as JSON Schema does
        n = non_negative(env, value, keyword)
        if at_most:
            ok: Callable[[Any], bool] = lambda x: len(x) <= n  # noqa: E731
        else:
            ok = lambda x: len(x) >= n  # noqa: E731
        text = message.format(f"{'at most' if at_most else 'at least'} {n}")
        return leaf(kind, keyword, ok, lambda x: f"{text} (got {len(x)})")

    return compile_size


def _missing_errors(names: tuple[str, ...], keyword: str, why: str,
                    tail: Path = ()) -> Callable[..., None]:
    """One error per name not in the object; its schema path is ``spath`` + ``tail``."""

    def errs(x: Any, path: Path, spath: Path, out: list[ErrorDetail]) -> None:
        for name in names:
            if name not in x:
                message = f"{name!r} is a required property{why}"
                out.append(ErrorDetail(path, message, keyword, (*spath, *tail)))

    return errs


def _has_all(names: tuple[str, ...]) -> Callable[[Any], bool]:
    if len(names) == 1:
        (only,) = names
        return lambda x: only in x

    def ok(x: Any) -> bool:
        for name in names:
            if name not in x:
                return False
        return True

    return ok


def kw_required(env: Env, value: Any) -> Optional[Check]:
    names = tuple(_strings(env, value, "required"))
    if not names:
        return None
    errs = _missing_errors(names, "required", "", ("required",))
    return Check(OBJECT, _has_all(names), errs, "required")


def kw_dependent_required(env: Env, value: Any) -> Optional[Check]:
    if not isinstance(value, dict):
        raise env.error(f"expected an object, got {short_json(value)}", "dependentRequired")
    rules = [(k, tuple(_strings(env, v, "dependentRequired"))) for k, v in value.items() if v]
    if not rules:
        return None
    return when_present(dependent_required_rules(rules, "dependentRequired"), "dependentRequired")


def dependent_required_rules(rules: list[tuple[str, tuple[str, ...]]], keyword: str) -> list[Rule]:
    """``when_present`` rules: if ``key`` is a member, so must ``names`` be."""
    return [(k, _has_all(names), _missing_errors(names, keyword, f" when {k!r} is present"))
            for k, names in rules]
