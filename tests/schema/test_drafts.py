"""lattice.schema: invalid schemas and where they fail, drafts (7 vs 2020-12), $ref / $id /
anchors and recursion, JSON semantics (numbers, equality, lengths, Python containers).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from helpers import errors_of

from lattice import schema
from lattice.errors import SchemaError
from lattice.schema import ValidationError


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"type": "strng"}, "#/type"),
        ({"type": 3}, "#/type"),
        ({"minimum": "3"}, "#/minimum"),
        ({"minimum": True}, "#/minimum"),
        ({"maxLength": -1}, "#/maxLength"),
        ({"multipleOf": 0}, "#/multipleOf"),
        ({"required": "name"}, "#/required"),
        ({"pattern": "("}, "#/pattern"),
        ({"patternProperties": {"[": {}}}, "#/patternProperties"),
        ({"properties": {"a": 3}}, "#/properties/a"),
        ({"items": "x"}, "#/items"),
        ({"allOf": []}, "#/allOf"),
        ({"anyOf": {}}, "#/anyOf"),
        ({"$ref": "#/$defs/missing"}, "#/$ref"),
        ({"$ref": "#nowhere"}, "#/$ref"),
        ({"$ref": "other.json"}, "#/$ref"),
        ({"properties": {"a/b": {"$ref": 1}}}, "#/properties/a~1b/$ref"),
        ({"enum": "a"}, "#/enum"),
        ({"uniqueItems": 1}, "#/uniqueItems"),
        ({"dependentRequired": {"a": "b"}}, "#/dependentRequired"),
        ({"pattern": "\\p{NotAThing}"}, "#/pattern"),
        ({"$defs": {"unused": {"type": "nope"}}}, "#/$defs/unused/type"),
        ({"definitions": {"unused": 3}}, "#/definitions/unused"),
    ],
)
def test_schema_errors_name_the_location(bad: Any, where: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(f"at {where}:")):
        schema.compile(bad)


def test_schema_error_is_a_value_error_and_not_a_validation_error() -> None:
    with pytest.raises(ValueError):
        schema.is_valid(1, {"type": "nope"})
    assert not issubclass(SchemaError, ValidationError)


def test_a_schema_must_be_an_object_or_boolean() -> None:
    with pytest.raises(SchemaError, match="object or a boolean"):
        schema.compile([{"type": "string"}])
    assert schema.is_valid(1, True) and not schema.is_valid(1, False)


def test_unknown_keywords_are_ignored() -> None:
    assert schema.is_valid(1, {"x-custom": {"type": "string"}, "description": "d"})


def test_draft_argument_is_checked() -> None:
    for bad in ("6", "draft7", 7, "2019-09"):
        with pytest.raises(ValueError, match=repr(bad)):
            schema.compile({}, draft=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=repr(bad)):
            schema.is_valid(1, {}, draft=bad)  # type: ignore[arg-type]


def test_draft_comes_from_schema_then_defaults_to_2020_12() -> None:
    tuple_schema = {"items": [{"type": "integer"}], "additionalItems": False}
    seven = {"$schema": "http://json-schema.org/draft-07/schema#", **tuple_schema}
    assert schema.compile(seven).draft == "7"
    assert schema.compile(tuple_schema).draft == "2020-12"
    assert schema.compile(tuple_schema, draft="7").draft == "7"
    assert not schema.is_valid([1, 2], seven)


def test_draft7_ref_overrides_siblings_but_2020_12_does_not() -> None:
    s = {
        "$defs": {"a": {"type": "integer"}},
        "definitions": {"a": {"type": "integer"}},
        "$ref": "#/definitions/a",
        "maximum": 5,
    }
    assert schema.is_valid(10, s, draft="7")
    assert not schema.is_valid(10, s, draft="2020-12")


def test_draft7_dependencies_and_2020_12_dependent_keywords() -> None:
    deps = {"dependencies": {"a": ["b"], "c": {"required": ["d"]}}}
    for draft in ("7", "2020-12"):
        assert not schema.is_valid({"a": 1}, deps, draft=draft)
        assert not schema.is_valid({"c": 1}, deps, draft=draft)
        assert schema.is_valid({"a": 1, "b": 2, "c": 3, "d": 4}, deps, draft=draft)
    assert schema.is_valid({"a": 1}, {"dependentRequired": {"a": ["b"]}}, draft="7")


def test_official_metaschemas_resolve_offline() -> None:
    assert schema.is_valid(
        {"type": "string"}, {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    )
    assert not schema.is_valid(
        {"type": 3}, {"$ref": "https://json-schema.org/draft/2020-12/schema"}
    )
    assert not schema.is_valid(
        {"minLength": -1}, {"$ref": "http://json-schema.org/draft-07/schema#"}
    )
    assert schema.is_valid({"minLength": 1}, {"$ref": "http://json-schema.org/draft-07/schema#"})


def test_local_refs_ids_anchors_and_pointer_escapes() -> None:
    s = {
        "$id": "https://example.com/root.json",
        "$defs": {
            "a/b": {"type": "integer"},
            "t~n": {"type": "string"},
            "pct%": {"type": "boolean"},
            "named": {"$anchor": "name", "type": "null"},
            "embedded": {"$id": "inner.json", "$defs": {"x": {"type": "array"}}},
        },
        "properties": {
            "slash": {"$ref": "#/$defs/a~1b"},
            "tilde": {"$ref": "#/$defs/t~0n"},
            "percent": {"$ref": "#/$defs/pct%25"},
            "anchor": {"$ref": "#name"},
            "relative": {"$ref": "inner.json#/$defs/x"},
            "absolute": {"$ref": "https://example.com/inner.json#/$defs/x"},
        },
    }
    good = {
        "slash": 1,
        "tilde": "s",
        "percent": True,
        "anchor": None,
        "relative": [],
        "absolute": [],
    }
    assert schema.is_valid(good, s)
    for key in good:
        assert not schema.is_valid({**good, key: {}}, s), key


def test_recursive_schemas() -> None:
    tree = {
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["children"],
    }
    assert schema.is_valid({"children": [{"children": []}, {"children": [{"children": []}]}]}, tree)
    assert errors_of({"children": [{"children": [{}]}]}, tree) == [
        "$.children[0].children[0]: 'children' is a required property"
    ]


def test_booleans_are_not_numbers_and_integral_floats_are_integers() -> None:
    assert not schema.is_valid(True, {"type": "integer"})
    assert not schema.is_valid(False, {"type": "number"})
    assert schema.is_valid(1.0, {"type": "integer"})
    assert not schema.is_valid(1.5, {"type": "integer"})
    assert schema.is_valid(True, {"maximum": 0})  # numeric keywords ignore non-numbers
    assert schema.is_valid(10**40, {"type": "integer", "minimum": 1e39})


def test_enum_and_const_use_json_equality() -> None:
    assert schema.is_valid(1.0, {"enum": [1]}) and schema.is_valid(1, {"const": 1.0})
    assert not schema.is_valid(True, {"enum": [1]}) and not schema.is_valid(1, {"const": True})
    assert not schema.is_valid(0, {"const": False})
    assert schema.is_valid([1.0, {"a": 2}], {"const": [1, {"a": 2.0}]})
    assert not schema.is_valid([True], {"const": [1]})
    assert schema.is_valid({"a": [1]}, {"enum": [{"a": [1.0]}]})


def test_unique_items_compare_by_json_equality_also_nested() -> None:
    assert not schema.is_valid([1, 1.0], {"uniqueItems": True})
    assert schema.is_valid([1, True], {"uniqueItems": True})
    assert schema.is_valid([0, False], {"uniqueItems": True})
    assert not schema.is_valid([{"a": [1]}, {"a": [1.0]}], {"uniqueItems": True})
    assert schema.is_valid([[1], [True]], {"uniqueItems": True})
    assert not schema.is_valid(["a", "b", "a"], {"uniqueItems": True})


def test_lengths_count_code_points() -> None:
    assert schema.is_valid("\U0001f600\U0001f600", {"maxLength": 2})
    assert not schema.is_valid("\U0001f600", {"minLength": 2})


def test_multiple_of_is_exact_for_decimal_values() -> None:
    assert schema.is_valid(0.0075, {"multipleOf": 0.0001})
    assert schema.is_valid(19.99, {"multipleOf": 0.01})
    assert not schema.is_valid(0.00751, {"multipleOf": 0.0001})
    assert schema.is_valid(1e308, {"multipleOf": 0.5})


def test_python_containers_stand_in_for_json_ones() -> None:
    from collections import OrderedDict

    s = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    assert schema.is_valid(OrderedDict(a=(1, 2)), s)
    assert not schema.is_valid(OrderedDict(a=(1, "x")), s)
    assert not schema.is_valid({1, 2}, {"type": "array"})
