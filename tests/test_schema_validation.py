"""lattice.schema validation: messages and paths, schema errors, drafts, caching, JSON rules."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from lattice import schema
from lattice.errors import LatticeError, SchemaError
from lattice.schema import ErrorDetail, ValidationError


def errors_of(instance: Any, schema_: Any, **options: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        schema.validate(instance, schema_, **options)
    return [str(e) for e in info.value.errors]


# -- error messages and paths ---------------------------------------------------------------

TOOL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2},
        "count": {"type": "integer", "maximum": 10},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}


def test_every_error_is_reported_with_its_path() -> None:
    found = errors_of(
        {"count": 12, "items": [{"name": "a"}, {"name": "b"}, {"name": 3}], "x": 1}, TOOL
    )
    assert found == [
        "$: 'name' is a required property",
        "$.count: must be at most 10 (got 12)",
        "$.items[2].name: expected string, got integer 3",
        "$: unexpected property 'x' (allowed: name, count, items)",
    ]


def test_error_objects_carry_path_lists_and_messages() -> None:
    with pytest.raises(ValidationError) as info:
        schema.validate({"items": [{}]}, TOOL)
    details = info.value.errors
    assert [(e.path, e.message) for e in details] == [
        ([], "'name' is a required property"),
        (["items", 0], "'name' is a required property"),
    ]
    assert details[1].json_path == "$.items[0]"
    assert (
        str(info.value)
        == "$: 'name' is a required property\n$.items[0]: 'name' is a required property"
    )


def test_validation_error_is_a_lattice_error_and_a_value_error() -> None:
    with pytest.raises(LatticeError):
        schema.validate(1, {"type": "string"})
    with pytest.raises(ValueError):
        schema.validate(1, {"type": "string"})


@pytest.mark.parametrize(
    ("instance", "schema_", "message"),
    [
        ("3", {"type": "integer"}, '$: expected integer, got string "3"'),
        (3, {"type": ["string", "null"]}, "$: expected string or null, got integer 3"),
        (
            3,
            {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "$: expected string or null, got integer 3",
        ),
        (12, {"maximum": 10}, "$: must be at most 10 (got 12)"),
        (10, {"exclusiveMaximum": 10}, "$: must be less than 10 (got 10)"),
        (0, {"minimum": 1}, "$: must be at least 1 (got 0)"),
        (7, {"multipleOf": 2}, "$: must be a multiple of 2 (got 7)"),
        ("abcdef", {"maxLength": 3}, "$: must be at most 3 characters long (got 6)"),
        ("b", {"pattern": "^a"}, '$: must match the pattern "^a" (got "b")'),
        ("c", {"enum": ["a", "b"]}, '$: must be one of: "a", "b" (got string "c")'),
        (2, {"const": 1}, "$: must be exactly 1 (got integer 2)"),
        ([1, 1], {"uniqueItems": True}, "$: items must be unique, but item 1 repeats item 0 (1)"),
        ([], {"minItems": 1}, "$: must have at least 1 items (got 0)"),
        ({}, {"minProperties": 1}, "$: must have at least 1 properties (got 0)"),
        (
            {"a": 1},
            {"dependentRequired": {"a": ["b"]}},
            "$: 'b' is a required property when 'a' is present",
        ),
        ("x", {"not": {"type": "string"}}, '$: must not match the schema {"type": "string"}'),
        (
            [1, 2],
            {"contains": {"type": "string"}},
            '$: must contain at least 1 item(s) matching {"type": "string"} (found 0)',
        ),
        (
            {"ab": 1},
            {"propertyNames": {"maxLength": 1}},
            "$: property name 'ab' is invalid: must be at most 1 characters long (got 2)",
        ),
        (
            [1, 2, 3],
            {"prefixItems": [{}], "items": False},
            "$: must have at most 1 items (got 3); extra items are not allowed",
        ),
        (
            {"a": 1},
            {"unevaluatedProperties": False},
            "$: unexpected property 'a' (unevaluatedProperties is false)",
        ),
        (
            [1],
            {"unevaluatedItems": False},
            "$: unexpected item at index 0 (unevaluatedItems is false)",
        ),
        (
            {"a": 1},
            {"properties": {"a": False}},
            "$.a: no value is allowed here (the schema is false)",
        ),
        (
            {"a b": "x"},
            {"properties": {"a b": {"type": "integer"}}},
            "$['a b']: expected integer, got string \"x\"",
        ),
    ],
)
def test_messages(instance: Any, schema_: Any, message: str) -> None:
    assert errors_of(instance, schema_) == [message]


def test_one_of_reports_the_branch_whose_discriminator_matches() -> None:
    shapes = {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                "required": ["kind", "r"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                "required": ["kind", "side"],
            },
        ]
    }
    assert errors_of({"kind": "square", "side": "big"}, shapes) == [
        '$.side: expected number, got string "big"'
    ]
    assert errors_of(
        {"kind": "circle", "r": 1, "side": 1}, {"oneOf": [{}, {"type": "object"}]}
    ) == ["$: must match exactly one of the oneOf options, but matches options 1, 2"]


def test_any_of_without_a_clear_branch_lists_every_option() -> None:
    [message] = errors_of({"a": 1}, {"anyOf": [{"required": ["b"]}, {"required": ["c"]}]})
    assert message.startswith("$: must match one of the anyOf options, but matches none")
    assert "option 1: 'b' is a required property" in message
    assert "option 2: 'c' is a required property" in message


def test_a_wrong_type_hides_the_other_keywords_of_that_schema() -> None:
    assert errors_of(3, {"type": "string", "minLength": 5, "enum": ["a"]}) == [
        "$: expected string, got integer 3"
    ]


def test_format_path() -> None:
    assert schema.format_path([]) == "$"
    assert schema.format_path(["items", 2, "name"]) == "$.items[2].name"
    assert schema.format_path(["it's", 0]) == "$['it\\'s'][0]"
    assert str(ErrorDetail(["a"], "bad")) == "$.a: bad"


# -- invalid schemas --------------------------------------------------------------------------


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


# -- drafts -------------------------------------------------------------------------------------


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


# -- JSON semantics ---------------------------------------------------------------------------


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


# -- compile and caching ------------------------------------------------------------------


def test_compiled_validator_methods() -> None:
    v = schema.compile(TOOL)
    assert isinstance(v, schema.Validator)
    assert v.is_valid({"name": "ok"}) and not v.is_valid({})
    assert v.errors({"name": "ok"}) == []
    assert [e.message for e in v.errors({})] == ["'name' is a required property"]
    v.validate({"name": "ok"})
    with pytest.raises(ValidationError):
        v.validate({})


def test_same_schema_object_is_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from lattice.schema import _api

    s = {"type": "object", "properties": {"n": {"type": "integer"}}, "title": "cache-test-1"}
    built: list[Any] = []
    original = _api.Validator.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        built.append(args[0])
        original(self, *args, **kwargs)

    monkeypatch.setattr(_api.Validator, "__init__", counting)
    first = schema.compile(s)
    for _ in range(5):
        assert schema.compile(s) is first
        assert schema.is_valid({"n": 1}, s)
        assert not schema.is_valid({"n": "1"}, s)
    assert schema.compile(copy.deepcopy(s)) is first  # equal JSON: same compiled validator
    assert len(built) == 1
    assert schema.compile(s, format_checker=True) is not first
    assert schema.compile(s, draft="7") is not first
    assert len(built) == 3


def test_schemas_that_are_not_plain_json_are_still_cached_by_identity() -> None:
    s = {"enum": [("a", "b")], "title": object()}
    assert schema.compile(s) is schema.compile(s)
    assert schema.is_valid(["a", "b"], s)


def test_format_is_an_annotation_unless_asked_for() -> None:
    s = {"type": "string", "format": "email"}
    assert schema.is_valid("nope", s)
    assert not schema.is_valid("nope", s, format_checker=True)
    assert schema.is_valid("a@b.example", s, format_checker=True)
    assert schema.compile({"format": "email"}, format_checker=True).is_valid(
        5
    )  # formats apply to strings only
    assert schema.is_valid("x", {"format": "not-a-known-format"}, format_checker=True)
    assert errors_of("2024-02-30", {"format": "date"}, format_checker=True) == [
        '$: must be a valid date (got "2024-02-30")'
    ]


def test_reference_cycles_that_never_reach_into_the_instance_are_schema_errors() -> None:
    for bad in (
        {"$ref": "#"},
        {"anyOf": [{"not": {"$ref": "#"}}]},
        {
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
            "$ref": "#/$defs/a",
        },
    ):
        with pytest.raises(SchemaError, match="would never end"):
            schema.compile(bad)
    linked = {"properties": {"next": {"$ref": "#"}}}  # recursion through a member is fine
    assert schema.is_valid({"next": {"next": {}}}, linked)
