"""lattice.schema's public surface, import cost, and bundled meta-schemas when vendored."""

from __future__ import annotations

import dataclasses
import enum
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Literal, Optional, Union

import pytest

import lattice
from lattice import schema
from lattice.errors import LatticeError, SchemaError
from lattice.schema import (
    ValidationError,
    compile,
    is_valid,
    schema_from_function,
    schema_from_type,
    validate,
)

PACKAGE = Path(lattice.__file__).resolve().parent


def test_public_names() -> None:
    assert set(schema.__all__) == {
        "validate",
        "is_valid",
        "compile",
        "Validator",
        "ValidationError",
        "ErrorDetail",
        "SchemaError",
        "format_path",
        "schema_from_type",
        "schema_from_function",
        "parse_docstring",
    }
    for name in schema.__all__:
        assert getattr(schema, name) is not None
    assert schema.SchemaError is SchemaError
    assert issubclass(schema.ValidationError, LatticeError)
    assert issubclass(schema.ValidationError, ValueError)


def test_import_is_cheap_and_lazy() -> None:
    code = (
        "import sys, lattice.schema\n"
        "lazy = ['lattice.schema._formats', 'lattice.schema._from_type', "
        "'lattice.schema._docstrings', 'lattice.schema._idna']\n"
        "assert not [m for m in lazy if m in sys.modules], [m for m in lazy if m in sys.modules]\n"
        "from lattice.schema import _registry\n"
        "assert not _registry._metaschema_cache\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


def test_metaschemas_are_bundled_as_package_data() -> None:
    root = PACKAGE / "schema" / "metaschemas"
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json"))
    assert names == [
        "draft2020-12/meta/applicator.json",
        "draft2020-12/meta/content.json",
        "draft2020-12/meta/core.json",
        "draft2020-12/meta/format-annotation.json",
        "draft2020-12/meta/format-assertion.json",
        "draft2020-12/meta/meta-data.json",
        "draft2020-12/meta/unevaluated.json",
        "draft2020-12/meta/validation.json",
        "draft2020-12/schema.json",
        "draft7/schema.json",
    ]
    for path in root.rglob("*.json"):
        document = json.loads(path.read_text(encoding="utf-8"))
        assert document["$id"].startswith(("https://json-schema.org/", "http://json-schema.org/"))


def test_works_when_vendored_into_another_package(tmp_path: Path) -> None:
    host = tmp_path / "hostapp"
    host.mkdir()
    (host / "__init__.py").write_text("")
    shutil.copytree(PACKAGE, host / "_lattice", ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "from hostapp._lattice import schema\n"
        "meta = {'$ref': 'https://json-schema.org/draft/2020-12/schema'}\n"
        "assert schema.is_valid({'type': 'string'}, meta)\n"
        "assert not schema.is_valid({'type': 1}, meta)\n"
        "assert not schema.is_valid({'type': 1}, {'$ref': 'http://json-schema.org/draft-07/schema#'})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


# -- SPEC 1 and 7 conformance ----------------------------------------------------------------


if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover
    from typing_extensions import NotRequired, TypedDict


OBJ = {"type": "object",
       "properties": {"a": {"type": "integer"},
                      "b": {"type": "array", "items": {"type": "string"}}},
       "required": ["a"]}


def test_validate_passes_silently():
    assert validate({"a": 1, "b": ["x"]}, OBJ) is None


def test_validation_error_lists_every_error_with_path_and_message():
    with pytest.raises(ValidationError) as info:
        validate({"a": "x", "b": ["ok", 3]}, OBJ)
    err = info.value
    assert isinstance(err, lattice.LatticeError) and isinstance(err, ValueError)
    assert schema.ValidationError is ValidationError
    paths = sorted(e.path for e in err.errors)
    assert paths == [["a"], ["b", 1]]
    for e in err.errors:
        assert isinstance(e.path, list)
        assert isinstance(e.message, str) and e.message
    lines = str(err).splitlines()
    assert len(lines) == len(err.errors)
    for e in err.errors:
        assert any(line.endswith(": " + e.message) and str(e.path[-1]) in line
                   for line in lines), (lines, e.message)


def test_missing_required_reported():
    with pytest.raises(ValidationError) as info:
        validate({}, OBJ)
    assert len(info.value.errors) == 1
    assert "a" in info.value.errors[0].message or info.value.errors[0].path == ["a"]


def test_is_valid():
    assert is_valid({"a": 1}, OBJ) is True
    assert is_valid({"a": 1.5}, OBJ) is False
    assert is_valid(True, {"type": "integer"}) is False  # a bool is not an integer


def test_compile_reusable():
    validator = compile(OBJ)
    assert validator.is_valid({"a": 3}) and not validator.is_valid({"a": "3"})
    assert validator.validate({"a": 3}) is None
    with pytest.raises(ValidationError):
        validator.validate({"b": []})


@pytest.mark.parametrize("bad", [
    {"type": "strnig"},
    {"type": 5},
    {"minLength": "three"},
    {"required": "a"},
    {"pattern": "(unclosed"},
    {"$ref": "#/$defs/nowhere"},
    {"properties": {"a": {"$ref": "#/definitions/missing"}}},
])
def test_schema_errors(bad):
    with pytest.raises(lattice.SchemaError) as info:
        compile(bad)
    assert isinstance(info.value, ValueError) and isinstance(info.value, lattice.LatticeError)


def test_local_refs_defs_and_anchors():
    s = {"$defs": {"pos": {"type": "integer", "minimum": 0}}, "$ref": "#/$defs/pos"}
    assert is_valid(3, s) and not is_valid(-1, s)
    s = {"$defs": {"name": {"$anchor": "nm", "type": "string"}},
         "properties": {"n": {"$ref": "#nm"}}}
    assert is_valid({"n": "x"}, s) and not is_valid({"n": 1}, s)
    s = {"definitions": {"p": {"type": "string"}}, "items": {"$ref": "#/definitions/p"}}
    assert is_valid(["a"], s) and not is_valid([1], s)
    recursive = {"type": "object", "properties": {"child": {"$ref": "#"}},
                 "additionalProperties": False}
    assert is_valid({"child": {"child": {}}}, recursive)
    assert not is_valid({"child": {"other": 1}}, recursive)


def test_draft_parameter():
    s = {"prefixItems": [{"type": "string"}]}
    assert is_valid([1], s) is False  # default draft 2020-12
    assert is_valid([1], s, draft="2020-12") is False
    assert is_valid([1], s, draft="7") is True  # prefixItems is not a draft-07 keyword
    assert compile(s, draft="7").is_valid([1]) is True
    with pytest.raises(ValidationError):
        validate([1], s, draft="2020-12")
    validate([1], s, draft="7")
    tuple_items = {"$schema": "http://json-schema.org/draft-07/schema#",
                   "items": [{"type": "string"}, {"type": "integer"}]}
    assert is_valid(["a", 1], tuple_items) and not is_valid(["a", "b"], tuple_items)
    assert is_valid(["a", 1], tuple_items, draft=None)


def test_draft7_dependencies():
    s = {"dependencies": {"card": ["billing"]}}
    assert is_valid({"card": 1, "billing": 2}, s, draft="7")
    assert not is_valid({"card": 1}, s, draft="7")


def test_core_keywords():
    assert is_valid("abc", {"type": "string", "minLength": 3, "maxLength": 3})
    assert not is_valid("ab", {"type": "string", "minLength": 3})
    assert is_valid(1.0, {"type": "integer"})  # 1.0 is an integer in JSON Schema
    assert not is_valid({"x": 1}, {"type": "object", "additionalProperties": False})
    assert is_valid("b", {"enum": ["a", "b"]}) and not is_valid("c", {"enum": ["a", "b"]})
    assert is_valid(2, {"oneOf": [{"minimum": 2}, {"maximum": 1}]})
    assert not is_valid(5, {"not": {"minimum": 3}})
    assert is_valid([1, 2], {"uniqueItems": True}) and not is_valid([1, 1], {"uniqueItems": True})
    assert not is_valid("abc", {"pattern": "^[0-9]+$"})


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Inner:
    name: str


@dataclasses.dataclass
class Outer:
    count: int
    inner: Inner
    tags: List[str] = dataclasses.field(default_factory=list)
    ratio: float = 1.0


class Movie(TypedDict):
    title: str
    year: int
    note: NotRequired[str]


@pytest.mark.parametrize("tp,good,bad", [
    (int, 3, "3"), (str, "x", 1), (float, 1.5, "1.5"), (bool, True, 1),
    (List[int], [1, 2], [1, "2"]), (Dict[str, int], {"a": 1}, {"a": "1"}),
    (Optional[int], None, "x"), (Union[int, str], "x", 1.5),
    (Literal["a", "b"], "a", "c"),
])
def test_schema_from_type_simple(tp, good, bad):
    s = schema_from_type(tp)
    assert is_valid(good, s) and not is_valid(bad, s)


def test_schema_from_type_primitive_shapes():
    assert schema_from_type(int)["type"] == "integer"
    assert schema_from_type(str)["type"] == "string"
    assert schema_from_type(float)["type"] == "number"
    assert schema_from_type(bool)["type"] == "boolean"
    assert schema_from_type(List[int])["type"] == "array"
    assert schema_from_type(Dict[str, int])["type"] == "object"
    assert is_valid(1, schema_from_type(Optional[int]))


def test_schema_from_type_enum():
    s = schema_from_type(Color)
    assert s["enum"] == ["red", "green"]
    assert is_valid("red", s) and not is_valid("RED", s)


def test_schema_from_type_dataclass():
    s = schema_from_type(Outer)
    assert s["type"] == "object"
    assert set(s["properties"]) == {"count", "inner", "tags", "ratio"}
    assert sorted(s.get("required", [])) == ["count", "inner"]
    assert is_valid({"count": 1, "inner": {"name": "x"}}, s)
    assert not is_valid({"count": 1, "inner": {"name": 2}}, s)
    assert not is_valid({"count": 1}, s)


def test_schema_from_type_typeddict():
    s = schema_from_type(Movie)
    assert sorted(s["required"]) == ["title", "year"]
    assert is_valid({"title": "A", "year": 1}, s)
    assert not is_valid({"title": "A"}, s)
    assert not is_valid({"title": "A", "year": 1, "note": 3}, s)


def google(city: str, days: int = 3, units: Optional[str] = None) -> str:
    """Forecast the weather.

    Args:
        city: The city to look up.
        days: How many days ahead.
        units: Metric or imperial.
    """
    return city


def numpy_style(city: str, days: int = 3) -> str:
    """Forecast the weather.

    Parameters
    ----------
    city : str
        The city to look up.
    days : int
        How many days ahead.
    """
    return city


def rest_style(city: str, days: int = 3) -> str:
    """Forecast the weather.

    :param city: The city to look up.
    :param days: How many days ahead.
    """
    return city


@pytest.mark.parametrize("fn", [google, numpy_style, rest_style])
def test_schema_from_function(fn):
    s = schema_from_function(fn)
    assert s["type"] == "object"
    props = s["properties"]
    assert props["city"]["type"] == "string"
    assert props["city"]["description"] == "The city to look up."
    assert props["days"]["description"] == "How many days ahead."
    assert props["days"].get("default") == 3
    assert s.get("required") == ["city"]
    assert is_valid({"city": "Oslo"}, s) and not is_valid({"days": 1}, s)


def test_schema_from_function_optional_param():
    s = schema_from_function(google)
    assert is_valid({"city": "x", "units": None}, s)
    assert is_valid({"city": "x", "units": "metric"}, s)
    assert not is_valid({"city": "x", "units": 5}, s)


@pytest.mark.parametrize("schema,good,bad", [
    ({"const": 3}, 3, 4),
    ({"if": {"minimum": 10}, "then": {"multipleOf": 5}, "else": {"maximum": 3}}, 15, 12),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1, "b": 2}, {"a": 1}),
    ({"contains": {"type": "string"}, "minContains": 2}, ["a", "b", 1], ["a", 1]),
    ({"propertyNames": {"pattern": "^x"}}, {"xa": 1}, {"ya": 1}),
    ({"patternProperties": {"^n_": {"type": "integer"}}}, {"n_a": 1}, {"n_a": "1"}),
    ({"properties": {"a": {}}, "unevaluatedProperties": False}, {"a": 1}, {"a": 1, "b": 2}),
    ({"prefixItems": [{"type": "integer"}], "items": False}, [1], [1, 2]),
    ({"allOf": [{"minimum": 1}, {"maximum": 3}]}, 2, 4),
    ({"anyOf": [{"type": "string"}, {"type": "null"}]}, None, 1),
    ({"exclusiveMinimum": 1, "maximum": 2}, 2, 1),
    ({"minProperties": 1, "maxItems": 1}, {"a": 1}, {}),
])
def test_2020_12_keywords(schema, good, bad):
    assert is_valid(good, schema) and not is_valid(bad, schema)


def test_more_schema_from_type():
    assert is_valid(None, schema_from_type(type(None)))
    assert not is_valid(0, schema_from_type(type(None)))
    s = schema_from_type(List[Inner])
    assert is_valid([{"name": "a"}], s) and not is_valid([{"name": 1}], s)
    s = schema_from_type(Dict[str, Color])
    assert is_valid({"k": "red"}, s) and not is_valid({"k": "blue"}, s)
    s = schema_from_type(Optional[Inner])
    assert is_valid(None, s) and is_valid({"name": "x"}, s) and not is_valid({}, s)
