"""schema_from_type, schema_from_function and parse_docstring."""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import (
    Any,
    Dict,
    FrozenSet,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import pytest

from lattice import schema
from lattice.errors import SchemaError

try:
    from typing_extensions import Annotated, NotRequired, Required, TypedDict
except ImportError:  # pragma: no cover
    from typing import Annotated, TypedDict  # type: ignore[assignment]

    NotRequired = Required = None  # type: ignore[assignment,misc]


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    A = 1
    B = "b"


@dataclasses.dataclass
class Address:
    """A postal address.

    Attributes:
        city: the city name
    """

    city: str
    zip: Optional[str] = None


@dataclasses.dataclass
class Person:
    name: str
    age: int
    addresses: List[Address] = dataclasses.field(default_factory=list)
    color: Color = Color.RED
    note: Annotated[str, "free text"] = ""


@dataclasses.dataclass
class Tree:
    value: int
    children: List[Tree] = dataclasses.field(default_factory=list)


class Movie(TypedDict, total=False):
    title: Required[str]
    year: int


class Point(TypedDict):
    x: float
    y: float
    label: NotRequired[str]


class Plain:
    pass


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (type(None), {"type": "null"}),
        (Any, {}),
        (list, {"type": "array"}),
        (List[int], {"type": "array", "items": {"type": "integer"}}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (Set[int], {"type": "array", "uniqueItems": True, "items": {"type": "integer"}}),
        (FrozenSet[str], {"type": "array", "uniqueItems": True, "items": {"type": "string"}}),
        (
            Tuple[int, str],
            {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
            },
        ),
        (Tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (Dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, Any], {"type": "object", "additionalProperties": {}}),
        (dict, {"type": "object"}),
        (Optional[int], {"type": ["integer", "null"]}),
        (Union[int, float], {"type": "number"}),
        (
            Union[int, List[int]],
            {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}}]},
        ),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, "a"], {"enum": [1, "a"]}),
        (Literal[Color.RED], {"type": "string", "enum": ["red"]}),
        (Color, {"type": "string", "enum": ["red", "green"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (Mixed, {"enum": [1, "b"]}),
        (Annotated[int, "how many"], {"type": "integer", "description": "how many"}),
        (Annotated[int, {"minimum": 0}], {"type": "integer", "minimum": 0}),
    ],
)
def test_schema_from_type(tp: Any, expected: dict[str, Any]) -> None:
    assert schema.schema_from_type(tp) == expected


@pytest.mark.skipif(sys.version_info < (3, 10), reason="X | Y needs Python 3.10")
def test_pep604_unions() -> None:
    assert schema.schema_from_type(eval("int | None")) == {"type": ["integer", "null"]}
    assert schema.schema_from_type(eval("list[int] | str"))["anyOf"][1] == {"type": "string"}


def test_dataclasses_use_defs_and_record_defaults() -> None:
    s = schema.schema_from_type(Person)
    assert s["type"] == "object"
    assert s["required"] == ["name", "age"]
    assert s["additionalProperties"] is False
    assert s["properties"]["addresses"] == {"type": "array", "items": {"$ref": "#/$defs/Address"}}
    assert s["properties"]["color"] == {"$ref": "#/$defs/Color", "default": "red"}
    assert s["properties"]["note"] == {"type": "string", "description": "free text", "default": ""}
    address = s["$defs"]["Address"]
    assert address["description"] == "A postal address."
    assert address["properties"]["city"] == {"type": "string", "description": "the city name"}
    assert address["properties"]["zip"] == {"type": ["string", "null"], "default": None}
    assert "Person" not in s["$defs"]  # inlined at the top, referenced nowhere
    assert "description" not in s  # the generated dataclass docstring is not a description


def test_recursive_dataclass() -> None:
    s = schema.schema_from_type(Tree)
    assert s["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    assert s["$defs"]["Tree"]["required"] == ["value"]
    assert schema.is_valid({"value": 1, "children": [{"value": 2, "children": []}]}, s)
    assert not schema.is_valid({"value": 1, "children": [{"children": []}]}, s)


def test_typed_dicts_with_total_required_and_not_required() -> None:
    movie = schema.schema_from_type(Movie)
    assert movie["required"] == ["title"]
    assert set(movie["properties"]) == {"title", "year"}
    point = schema.schema_from_type(Point)
    assert point["required"] == ["x", "y"]
    assert point["properties"]["label"] == {"type": "string"}


@pytest.mark.parametrize("tp", [Plain, bytes, Dict[int, str], Literal[b"x"], complex])
def test_unsupported_types(tp: Any) -> None:
    with pytest.raises(SchemaError):
        schema.schema_from_type(tp)


def test_same_class_names_do_not_collide() -> None:
    First = dataclasses.make_dataclass("Item", [("a", int)])
    Second = dataclasses.make_dataclass("Item", [("b", str)])
    s = schema.schema_from_type(Tuple[First, Second])  # type: ignore[valid-type]
    assert s["prefixItems"] == [{"$ref": "#/$defs/Item"}, {"$ref": "#/$defs/Item_"}]
    assert schema.is_valid([{"a": 1}, {"b": "x"}], s)
    assert not schema.is_valid([{"b": "x"}, {"a": 1}], s)


# -- functions -------------------------------------------------------------------------------


class ToolContext:
    pass


def search(
    query: str,
    limit: int = 10,
    tags: Optional[List[str]] = None,
    mode: Literal["fast", "exact"] = "fast",
    ctx: ToolContext = None,  # type: ignore[assignment]
    **extra: Any,
) -> str:
    """Search the catalogue.

    Matches titles and authors.

    Args:
        query: words to look for;
            several words are ANDed.
        limit (int): at most this many results.
        tags: only items with all of these tags.

    Returns:
        The matches, one per line.
    """
    return query


def test_schema_from_function() -> None:
    s = schema.schema_from_function(search)
    assert s == {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "words to look for; several words are ANDed.",
            },
            "limit": {
                "type": "integer",
                "description": "at most this many results.",
                "default": 10,
            },
            "tags": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "description": "only items with all of these tags.",
                "default": None,
            },
            "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
        },
        "required": ["query"],
    }
    assert schema.is_valid({"query": "x", "anything": 1}, s)  # **extra accepts more names


def test_function_without_kwargs_refuses_unknown_names_and_skips_self() -> None:
    class Service:
        def lookup(self, key: str, *, exact: bool = False) -> None:
            """Look a key up."""

    s = schema.schema_from_function(Service.lookup)
    assert s["properties"] == {
        "key": {"type": "string"},
        "exact": {"type": "boolean", "default": False},
    }
    assert s["additionalProperties"] is False
    assert schema.schema_from_function(Service().lookup)["required"] == ["key"]


def test_function_parameters_edge_cases() -> None:
    def untyped(a, b=None, c=object()):  # type: ignore[no-untyped-def]
        pass

    s = schema.schema_from_function(untyped)
    assert s["properties"] == {"a": {}, "b": {"default": None}, "c": {}}
    assert s["required"] == ["a"]

    def star(*args: int) -> None:
        pass

    with pytest.raises(SchemaError, match="args"):
        schema.schema_from_function(star)

    def bad(ok: int, thing: Plain) -> None:
        pass

    with pytest.raises(SchemaError, match="'thing'"):
        schema.schema_from_function(bad)

    def custom(a: int, secret: Plain) -> None:
        pass

    s = schema.schema_from_function(custom, skip=lambda ann: ann is Plain)
    assert list(s["properties"]) == ["a"]


def test_tool_context_annotation_as_unresolvable_string_is_skipped() -> None:
    def handler(x: int, context: ToolContextThatDoesNotExist) -> None:  # noqa: F821
        pass

    def handler2(x: int, context: lattice.ToolContext) -> None:  # noqa: F821
        pass

    assert list(schema.schema_from_function(handler2)["properties"]) == ["x"]
    with pytest.raises(SchemaError, match="'context'"):
        schema.schema_from_function(handler)


def test_function_schemas_are_valid_json_schema_with_nested_defs() -> None:
    def register(person: Person, backup: Optional[Address] = None) -> None:
        pass

    s = schema.schema_from_function(register)
    assert set(s["$defs"]) == {"Person", "Address", "Color"}
    meta = {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    assert schema.is_valid(s, meta)
    assert schema.is_valid({"person": {"name": "Ada", "age": 36, "addresses": [{"city": "L"}]}}, s)
    assert not schema.is_valid({"person": {"name": "Ada", "age": "36"}}, s)


# -- docstrings ------------------------------------------------------------------------------


def test_google_docstring() -> None:
    description, params = schema.parse_docstring(search.__doc__)
    assert description == (
        "Search the catalogue.\n\nMatches titles and authors.\n\n"
        "Returns:\n    The matches, one per line."
    )
    assert params == {
        "query": "words to look for; several words are ANDed.",
        "limit": "at most this many results.",
        "tags": "only items with all of these tags.",
    }


def test_numpy_docstring() -> None:
    doc = """Add numbers.

    Parameters
    ----------
    a : int
        The first number.
    b : int, optional
        The second
        number.

    Returns
    -------
    int
    """
    description, params = schema.parse_docstring(doc)
    assert params == {"a": "The first number.", "b": "The second number."}
    assert description.startswith("Add numbers.") and "Returns" in description
    assert "Parameters" not in description


def test_rest_docstring() -> None:
    doc = """Fetch a page.

    :param url: the address
        to fetch.
    :type url: str
    :param int timeout: seconds to wait
    :returns: the body
    """
    description, params = schema.parse_docstring(doc)
    assert params == {"url": "the address to fetch.", "timeout": "seconds to wait"}
    assert description == "Fetch a page.\n\n:returns: the body"


def test_empty_docstrings() -> None:
    assert schema.parse_docstring(None) == ("", {})
    assert schema.parse_docstring("   ") == ("", {})
    assert schema.parse_docstring("Just a summary.") == ("Just a summary.", {})
