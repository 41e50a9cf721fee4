"""lattice.schema validation: error messages and paths, compiling and caching, formats.
Invalid schemas, drafts, $ref and JSON semantics: test_drafts.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers import errors_of

from lattice import schema
from lattice.errors import LatticeError, SchemaError
from lattice.schema import ErrorDetail, ValidationError

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
