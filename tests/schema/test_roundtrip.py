"""Round trip: random instances of typed values validate against schema_from_type; broken ones fail.

A small generator below knows every kind of type schema_from_type supports. For each type
it makes JSON values an API would send (dataclasses as objects, enums as their values),
and "mutations" that must be rejected: a wrong JSON type, a missing required field, an
unknown field, a value outside a Literal or Enum, a bad item deep inside.
"""

from __future__ import annotations

import dataclasses
import enum
import random
import typing
from typing import Any, Dict, List, Literal, Optional, Set, Tuple, Union

import pytest

from lattice import schema

try:
    from typing_extensions import NotRequired, TypedDict
except ImportError:  # pragma: no cover
    from typing import TypedDict  # type: ignore[assignment]

    NotRequired = None  # type: ignore[assignment,misc]


class Suit(enum.Enum):
    HEARTS = "hearts"
    SPADES = "spades"


class Rank(enum.IntEnum):
    ACE = 1
    KING = 13


@dataclasses.dataclass
class Card:
    suit: Suit
    rank: Rank
    face_up: bool = False


@dataclasses.dataclass
class Hand:
    owner: str
    cards: List[Card]
    score: Optional[float] = None
    labels: Dict[str, int] = dataclasses.field(default_factory=dict)


class Meta(TypedDict):
    version: int
    tag: NotRequired[Literal["alpha", "beta"]]


@dataclasses.dataclass
class Node:
    name: str
    children: List[Node] = dataclasses.field(default_factory=list)
    meta: Optional[Meta] = None


TYPES: list[Any] = [
    str,
    int,
    float,
    bool,
    type(None),
    List[int],
    Tuple[str, int],
    Tuple[float, ...],
    Set[str],
    Dict[str, bool],
    Optional[str],
    Union[int, str, None],
    Literal["a", "b", 3],
    Suit,
    Rank,
    Card,
    Hand,
    Meta,
    Node,
    List[Optional[Card]],
    Dict[str, List[Node]],
]

_KINDS = ("string", "integer", "number", "boolean", "null", "array", "object")
_SAMPLES = {
    "string": "zzz",
    "integer": 7,
    "number": 2.5,
    "boolean": True,
    "null": None,
    "array": [1],
    "object": {"unexpected": 1},
}


def _fields(tp: Any) -> list[tuple[str, Any, bool]]:
    """(name, type, required) of a dataclass or TypedDict."""
    hints = typing.get_type_hints(tp, include_extras=True)
    if dataclasses.is_dataclass(tp):
        return [
            (
                f.name,
                hints[f.name],
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            )
            for f in dataclasses.fields(tp)
        ]
    out = []
    for name, hint in hints.items():
        optional = typing.get_origin(hint) is NotRequired
        out.append((name, typing.get_args(hint)[0] if optional else hint, not optional))
    return out


def _is_record(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) or (
        isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")
    )


def kinds(tp: Any) -> set[str]:
    """The JSON types a value of ``tp`` may have."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is str:
        return {"string"}
    if tp is bool:
        return {"boolean"}
    if tp is int:
        return {"integer"}
    if tp is float:
        return {"integer", "number"}
    if tp is type(None):
        return {"null"}
    if origin is Union:
        return set().union(*(kinds(a) for a in args))
    if origin is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        values = args if origin is Literal else [m.value for m in tp]
        return {"string" if isinstance(v, str) else "integer" for v in values}
    if origin in (list, tuple, set):
        return {"array"}
    return {"object"}


def generate(tp: Any, rng: random.Random, depth: int = 0) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is str:
        return rng.choice(["", "x", "h\u00e9llo", "\U0001f600", "with space"])
    if tp is bool:
        return rng.random() < 0.5
    if tp is int:
        return rng.randint(-(10**12), 10**12)
    if tp is float:
        return rng.choice([rng.uniform(-1e6, 1e6), 3, 0.0])
    if tp is type(None):
        return None
    if origin is Union:
        return generate(rng.choice(args), rng, depth)
    if origin is Literal:
        return rng.choice(args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return rng.choice(list(tp)).value
    size = 0 if depth > 2 else rng.randint(0, 3)
    if origin is list:
        return [generate(args[0], rng, depth + 1) for _ in range(size)]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return [generate(args[0], rng, depth + 1) for _ in range(size)]
        return [generate(a, rng, depth + 1) for a in args]
    if origin is set:
        return list(dict.fromkeys(generate(args[0], rng, depth + 1) for _ in range(size)))
    if origin is dict:
        return {f"k{i}": generate(args[1], rng, depth + 1) for i in range(size)}
    assert _is_record(tp), tp
    return {
        name: generate(hint, rng, depth + 1)
        for name, hint, required in _fields(tp)
        if required or rng.random() < 0.5
    }


def mutate(tp: Any, value: Any, rng: random.Random) -> Any:
    """A value that no longer fits ``tp``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    options = ["retype"]
    if _is_record(tp):
        options += ["unknown"] + (
            ["drop"] if any(r and n in value for n, _, r in _fields(tp)) else []
        )
        options += ["deep"] if value else []
    if origin in (list, tuple) and value and not (origin is tuple and args[-1] is not Ellipsis):
        options.append("item")
    if origin is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        options.append("outside")
    choice = rng.choice(options)
    if choice == "unknown":
        return {**value, "not_a_field": 1}
    if choice == "drop":
        name = rng.choice([n for n, _, r in _fields(tp) if r and n in value])
        return {k: v for k, v in value.items() if k != name}
    if choice == "deep":
        hints = {n: h for n, h, _ in _fields(tp)}
        name = rng.choice(list(value))
        return {**value, name: mutate(hints[name], value[name], rng)}
    if choice == "item":
        i = rng.randrange(len(value))
        return value[:i] + [mutate(args[0], value[i], rng)] + value[i + 1 :]
    if choice == "outside":
        return "definitely-not-a-member"
    wrong = [
        k for k in _KINDS if k not in kinds(tp) and not (k == "integer" and "number" in kinds(tp))
    ]
    return _SAMPLES[rng.choice(wrong)]


def _check(tp: Any, rng: random.Random, rounds: int) -> None:
    validator = schema.compile(schema.schema_from_type(tp))
    for _ in range(rounds):
        value = generate(tp, rng)
        assert validator.is_valid(value), (tp, value, validator.errors(value))
        broken = mutate(tp, value, rng)
        assert not validator.is_valid(broken), (tp, value, broken)
        assert validator.errors(broken), (tp, broken)


@pytest.mark.parametrize("tp", TYPES, ids=lambda t: getattr(t, "__name__", None) or str(t))
def test_generated_instances_round_trip(tp: Any) -> None:
    _check(tp, random.Random(f"lattice-{tp}"), rounds=60)


@pytest.mark.slow
def test_round_trip_with_hypothesis_randomness() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    strategies = pytest.importorskip("hypothesis.strategies")

    @hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
    @hypothesis.given(strategies.sampled_from(TYPES), strategies.randoms(use_true_random=False))
    def run(tp: Any, rng: random.Random) -> None:
        _check(tp, rng, rounds=3)

    run()


def test_schemas_from_types_validate_against_the_metaschema() -> None:
    meta = schema.compile({"$ref": "https://json-schema.org/draft/2020-12/schema"})
    for tp in TYPES:
        generated = schema.schema_from_type(tp)
        assert meta.is_valid(generated), (tp, meta.errors(generated))
