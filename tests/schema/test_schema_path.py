"""``ErrorDetail.schema_path``: the keywords and keys followed from the schema root to the
keyword that found the problem (SPEC 16a), as JSON Schema's ``keywordLocation``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import NO_SHARED, SHARED
from suite_adapter import needs_remote

from lattice import schema


def _paths(instance: Any, s: Any, draft: str = "2020-12") -> list[tuple[list[Any], list[Any]]]:
    return [(e.path, e.schema_path) for e in schema.compile(s, draft=draft).errors(instance)]


@pytest.mark.parametrize(("s", "instance", "expected"), [
    ({"type": "string"}, 3, [([], ["type"])]),
    ({"properties": {"n": {"type": "integer"}}}, {"n": "3"}, [(["n"], ["properties", "n", "type"])]),
    ({"required": ["a", "b"]}, {}, [([], ["required"]), ([], ["required"])]),
    ({"items": {"minimum": 0}}, [1, -1], [([1], ["items", "minimum"])]),
    ({"prefixItems": [{"type": "string"}], "items": False}, ["a", 2],
     [([], ["items"])]),
    ({"items": [{"type": "string"}], "additionalItems": {"type": "string"}}, [1, 2],
     [([0], ["items", 0, "type"]), ([1], ["additionalItems", "type"])]),
    ({"patternProperties": {"^x": {"type": "integer"}}}, {"xa": "no"},
     [(["xa"], ["patternProperties", "^x", "type"])]),
    ({"additionalProperties": False}, {"a": 1}, [([], ["additionalProperties"])]),
    ({"additionalProperties": {"type": "null"}}, {"a": 1},
     [(["a"], ["additionalProperties", "type"])]),
    ({"propertyNames": {"maxLength": 1}}, {"ab": 1}, [([], ["propertyNames", "maxLength"])]),
    ({"allOf": [{"minimum": 5}]}, 3, [([], ["allOf", 0, "minimum"])]),
    ({"anyOf": [{"type": "string"}, {"type": "null"}]}, 3, [([], ["anyOf"])]),
    ({"oneOf": [{"minimum": 0}, {"maximum": 10}]}, 5, [([], ["oneOf"])]),
    ({"not": {"type": "integer"}}, 3, [([], ["not"])]),
    ({"if": {"minimum": 0}, "then": {"maximum": 1}, "else": {"const": -1}}, 5,
     [([], ["then", "maximum"])]),
    ({"if": {"minimum": 0}, "then": {"maximum": 1}, "else": {"const": -1}}, -5,
     [([], ["else", "const"])]),
    ({"dependentRequired": {"a": ["b"]}}, {"a": 1}, [([], ["dependentRequired", "a"])]),
    ({"dependentSchemas": {"a": {"required": ["b"]}}}, {"a": 1},
     [([], ["dependentSchemas", "a", "required"])]),
    ({"contains": {"type": "string"}, "minContains": 2}, ["a"], [([], ["minContains"])]),
    ({"contains": {"type": "string"}, "maxContains": 1}, ["a", "b"], [([], ["maxContains"])]),
    ({"contains": {"type": "string"}}, [1], [([], ["contains"])]),
    ({"unevaluatedProperties": False}, {"a": 1}, [([], ["unevaluatedProperties"])]),
    ({"properties": {"a": False}}, {"a": 1}, [(["a"], ["properties", "a"])]),
])
def test_schema_path_names_the_keyword(s: Any, instance: Any, expected: list[Any]) -> None:
    assert _paths(instance, s) == expected


def test_schema_path_goes_through_references() -> None:
    s = {
        "$defs": {"node": {"properties": {"next": {"$ref": "#/$defs/node"},
                                          "n": {"type": "integer"}}}},
        "$ref": "#/$defs/node",
    }
    assert _paths({"next": {"next": {"n": "x"}}}, s) == [(
        ["next", "next", "n"],
        ["$ref", "properties", "next", "$ref", "properties", "next", "$ref", "properties", "n",
         "type"],
    )]


def test_draft7_dependencies_name_the_key() -> None:
    s = {"dependencies": {"a": ["b"], "c": {"required": ["d"]}}}
    assert _paths({"a": 1, "c": 1}, s, "7") == [
        ([], ["dependencies", "a"]), ([], ["dependencies", "c", "required"])]


def test_validation_error_lists_schema_paths() -> None:
    with pytest.raises(schema.ValidationError) as caught:
        schema.validate({"n": "3"}, {"properties": {"n": {"type": "integer"}}})
    (error,) = caught.value.errors
    assert error.schema_path == ["properties", "n", "type"] and error.path == ["n"]
    assert "schema_path=['properties', 'n', 'type']" in repr(error)


def _walk(s: Any, schema_path: list[Any]) -> Any:
    """The schema object at ``schema_path``; references are not followed (None past one)."""
    node = s
    for step in schema_path:
        if step in ("$ref", "$dynamicRef"):
            return None
        assert isinstance(node, (dict, list)), (s, schema_path)
        node = node[step]  # a KeyError/IndexError: the path names no place in the schema
    return node


SUITE = SHARED / "data/JSON-Schema-Test-Suite/tests"


@pytest.mark.skipif(not SUITE.is_dir(), reason=NO_SHARED)
@pytest.mark.parametrize(("draft", "folder"), [("2020-12", "draft2020-12"), ("7", "draft7")])
def test_every_suite_error_names_a_place_in_its_schema(draft: str, folder: str) -> None:
    checked = 0
    for path in sorted((SUITE / folder).glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8")):
            if path.name == "refRemote.json" or needs_remote(case["schema"], draft):
                continue
            validator = schema.compile(case["schema"], draft=draft)
            for test in case["tests"]:
                for error in validator.errors(test["data"]):
                    _walk(case["schema"], error.schema_path)
                    checked += 1
    assert checked > 300  # the suite has several hundred invalid instances per draft
