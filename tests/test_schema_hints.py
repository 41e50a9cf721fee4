"""Classes whose module is not in sys.modules (code run by exec with its own __name__, as
doc runners and notebooks do) resolve their type hints on every Python, 3.9 included,
where typing.get_type_hints raises KeyError for them (issue 13, item 11)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import List, Optional, Union

from conftest import reply, tool_use

from lattice import SUBMIT_OUTPUT_TOOL_NAME, Agent
from lattice.output import build
from lattice.schema import schema_from_type
from lattice.schema._hints import class_hints
from lattice.testing import ScriptedModelClient

GHOST = "lattice_test_ghost_module"  # never imported: only a __name__ for exec

CODE = """
from dataclasses import dataclass, field
from typing import List, Optional

@dataclass
class Leg:
    city: str
    nights: int = 1

@dataclass
class Trip:
    name: str
    legs: List[Leg] = field(default_factory=list)
    budget: Optional[float] = None
"""


@dataclass
class Stamped:
    # String annotations (this module has `from __future__ import annotations`): they
    # resolve against this module's globals, even from a subclass defined elsewhere.
    stamp: Optional[int]
    tags: List[str]


def ghost_namespace(code=CODE, **names):
    namespace = {"__name__": GHOST, **names}
    # dont_inherit: the code's annotations stay objects (no `from __future__` from here).
    exec(compile(code, "<ghost>", "exec", dont_inherit=True), namespace)
    assert GHOST not in sys.modules
    return namespace


def test_schema_from_an_exec_defined_dataclass():
    trip = ghost_namespace()["Trip"]
    schema = schema_from_type(trip)
    assert schema["required"] == ["name"]
    assert schema["properties"]["legs"] == {"type": "array", "items": {"$ref": "#/$defs/Leg"}}
    assert schema["$defs"]["Leg"]["properties"]["nights"]["type"] == "integer"


def test_structured_result_built_from_an_exec_defined_dataclass():
    ns = ghost_namespace()
    payload = {"name": "Alps", "legs": [{"city": "Bern", "nights": 2}], "budget": 900}
    client = ScriptedModelClient([reply(tool_use(SUBMIT_OUTPUT_TOOL_NAME, payload, "s1"))])
    result = Agent(model="m", model_client=client, output_schema=ns["Trip"]).prompt("plan")
    assert result.subtype == "success", result
    assert result.structured_result == ns["Trip"]("Alps", [ns["Leg"]("Bern", 2)], 900.0)
    assert isinstance(result.structured_result.budget, float)


def test_inherited_string_annotations_use_their_own_module():
    code = "@dataclass\nclass Entry(Stamped):\n    note: str\n"
    namespace = ghost_namespace(CODE + code, Stamped=Stamped)
    hints = class_hints(namespace["Entry"])
    assert hints == {"stamp": Optional[int], "tags": List[str], "note": str}
    assert list(schema_from_type(namespace["Entry"])["properties"]) == ["stamp", "tags", "note"]


def test_optional_float_fields_get_floats_and_int_or_float_keeps_ints():

    @dataclass
    class Reading:
        value: Optional[float]
        either: Union[int, float]
        flag: Optional[float] = None

    built = build(Reading, {"value": 3, "either": 4, "flag": None})
    assert built == Reading(3.0, 4, None)
    assert type(built.value) is float and type(built.either) is int
    assert build(Optional[float], True) is True  # a bool is not widened to a number
