"""Over-deep values never surface as a bare ``RecursionError`` (issue 13, item 9).

An instance nested 10,000 deep (what a hostile or broken model can send) gets a clean
``ValidationError``; a schema or a type nested too deep to compile gets ``SchemaError``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, List

import pytest

from lattice import schema
from lattice.errors import SchemaError
from lattice.schema._json import MAX_DEPTH, nesting_depth

DEPTH = 10_000


def _nest(make, depth: int = DEPTH, inner: Any = None) -> Any:
    value = inner
    for _ in range(depth):
        value = make(value)
    return value


DEEP_LIST = _nest(lambda v: [v], inner=[])
DEEP_OBJECT = _nest(lambda v: {"a": v}, inner={})
TOO_DEEP = f"is nested too deeply to validate (more than {MAX_DEPTH} levels"

# Schemas that follow the instance down (recursion through $ref, whole-item comparison).
FOLLOWING = [
    ({"type": "array", "items": {"$ref": "#"}}, DEEP_LIST),
    ({"$defs": {"n": {"type": "object", "additionalProperties": {"$ref": "#/$defs/n"}}},
      "$ref": "#/$defs/n"}, DEEP_OBJECT),
    ({"properties": {"a": {"$ref": "#"}}, "unevaluatedProperties": False}, DEEP_OBJECT),
    ({"$dynamicAnchor": "node", "type": "object",
      "additionalProperties": {"$dynamicRef": "#node"}}, DEEP_OBJECT),
    ({"type": "array", "uniqueItems": True}, [DEEP_LIST, 1]),
]


@pytest.mark.parametrize(("s", "instance"), FOLLOWING, ids=range(len(FOLLOWING)))
def test_deep_instance_against_a_following_schema_is_a_validation_error(s, instance):
    validator = schema.compile(s)
    assert validator.is_valid(instance) is False
    with pytest.raises(schema.ValidationError) as caught:
        validator.validate(instance)
    assert [(e.path, e.keyword) for e in caught.value.errors] == [([], "depth")]
    assert TOO_DEEP in str(caught.value)
    assert not schema.is_valid(instance, s)


@pytest.mark.parametrize("s", [{"type": "string"}, {"enum": [[1]]}, {"const": {"a": {"a": 1}}}])
def test_deep_instance_in_messages_is_shown_short(s):
    instance = DEEP_OBJECT if "const" in s else DEEP_LIST
    errors = schema.compile(s).errors(instance)
    assert len(errors) == 1 and "nested too deeply to show" in errors[0].message


def test_depth_that_fits_still_validates_and_reports_real_errors():
    s = {"type": "array", "items": {"$ref": "#"}}
    assert schema.is_valid(_nest(lambda v: [v], 50, []), s)
    errors = schema.compile(s).errors(_nest(lambda v: [v], 50, ["x"]))
    assert [e.message for e in errors] == ['expected array, got string "x"']
    assert len(errors[0].path) == 51


def test_shallow_schemas_are_not_limited_by_instance_depth():
    assert schema.is_valid(DEEP_LIST, {"type": "array"})
    assert schema.is_valid(DEEP_OBJECT, {"type": "object", "required": ["a"]})


def test_deep_schema_is_a_schema_error():
    with pytest.raises(SchemaError, match="invalid schema at #: it is nested too deeply to compile"):
        schema.compile(_nest(lambda v: {"items": v}, inner={}))
    with pytest.raises(SchemaError, match="nested too deeply"):
        schema.compile(_nest(lambda v: {"allOf": [v]}, inner={}))


def test_deep_type_is_a_schema_error():
    deep_type: Any = int
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # typing itself recurses to build (and hash) the alias
    try:
        for _ in range(1200):
            deep_type = List[deep_type]
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(SchemaError, match="type: the type is nested too deeply"):
        schema.schema_from_type(deep_type)
    classes: list[type] = [dataclasses.make_dataclass("Leaf", [("x", int)])]
    for i in range(500):
        classes.append(dataclasses.make_dataclass(f"Level{i}", [("child", classes[-1])]))
    with pytest.raises(SchemaError, match="nested too deeply"):
        schema.schema_from_type(classes[-1])


def test_nesting_depth_counts_iteratively():
    assert nesting_depth(1) == 0
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    assert nesting_depth(DEEP_LIST) == MAX_DEPTH + 1  # stops counting past the limit
    assert nesting_depth(DEEP_LIST, limit=DEPTH + 5) == DEPTH + 1
