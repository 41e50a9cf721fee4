"""``SchemaError.path``/``.reason`` from ``compile``, and ``relocate`` for wrapped schemas
(issue 13, item 11: an invalid ``output_schema`` reported a path inside lattice's wrapper)."""

import pytest

from lattice import schema
from lattice.errors import SchemaError
from lattice.schema._errors import relocate


@pytest.mark.parametrize(("s", "path", "reason"), [
    ({"type": "strin"}, ["type"], 'unknown type "strin"'),
    ({"allOf": [{"minimum": "x"}]}, ["allOf", 0, "minimum"], 'expected a number, got "x"'),
    ({"properties": {"a/b": {"items": [1]}}}, ["properties", "a/b", "items", 0],
     "a schema must be an object or a boolean, got 1"),
    ({"properties": {"0": {"pattern": "("}}}, ["properties", "0", "pattern"],
     "invalid regular expression '('"),
    ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, ["$defs", "a"],
     "it leads back to #/$defs/a"),
    (5, [], "a schema must be an object or a boolean, got 5"),
])
def test_schema_error_has_path_and_reason(s, path, reason):
    with pytest.raises(SchemaError) as caught:
        schema.compile(s)
    assert caught.value.path == path
    assert caught.value.reason.startswith(reason)
    assert str(caught.value).endswith(caught.value.reason)
    assert str(caught.value).startswith("invalid schema at #")


def test_relocate_takes_a_wrapper_off_the_path():
    wrapper = {"type": "object", "properties": {"value": {"type": "array", "items": {"type": 3}}}}
    with pytest.raises(SchemaError) as caught:
        schema.compile(wrapper)
    assert caught.value.path == ["properties", "value", "items", "type"]
    moved = relocate(caught.value, ["properties", "value"], "output_schema")
    assert isinstance(moved, SchemaError)
    assert str(moved) == ("invalid output_schema at #/items/type: expected a type name or a "
                          "list of them, got 3")
    assert moved.path == ["items", "type"] and moved.reason == caught.value.reason


def test_relocate_leaves_paths_outside_the_prefix_alone():
    error = SchemaError("invalid schema at #/$defs/x: bad", path=["$defs", "x"], reason="bad")
    assert str(relocate(error, ["properties", "value"])) == "invalid schema at #/$defs/x: bad"


def test_schema_error_defaults_for_other_raisers():
    error = SchemaError("type -> X: unsupported")
    assert error.path == [] and error.reason == "type -> X: unsupported"
