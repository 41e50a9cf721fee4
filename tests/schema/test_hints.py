"""Type hints that ``typing.get_type_hints`` alone cannot resolve (issue 13, item 11).

The README's test command failed on Python 3.9: its code runs through ``exec`` in a fresh
namespace named ``readme``, which is not in ``sys.modules``, and 3.9's ``get_type_hints``
looks the module up there (``SchemaError ... cannot resolve the type hints of Forecast:
'readme'``). The same failure shows on every Python with string annotations that name
names of that namespace, or classes local to a function.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lattice import schema
from lattice.errors import SchemaError

ROOT = Path(__file__).resolve().parents[2]

EXEC_CODE = '''
from typing import List, Optional, TypedDict
from lattice import schema

class Inner(TypedDict):
    n: int

class Forecast(TypedDict):
    city: str
    inner: "Optional[Inner]"
    items: "List[Inner]"

result = schema.schema_from_type(Forecast)
'''

INNER = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
         "additionalProperties": False}


def test_class_made_by_exec_in_a_fresh_namespace():
    namespace = {"__name__": "readme"}  # as tests/examples/test_readme.py runs the README
    exec(compile(EXEC_CODE, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result["properties"]["inner"] == {"anyOf": [{"$ref": "#/$defs/Inner"},
                                                       {"type": "null"}]}
    assert result["properties"]["items"] == {"type": "array", "items": {"$ref": "#/$defs/Inner"}}
    assert result["$defs"] == {"Inner": INNER}


def test_local_classes_under_future_annotations():
    @dataclasses.dataclass
    class Part:
        n: int

    @dataclasses.dataclass
    class Whole:
        part: Part
        parts: list[Part]

    result = schema.schema_from_type(Whole)
    assert result["properties"] == {
        "part": {"$ref": "#/$defs/Part"},
        "parts": {"type": "array", "items": {"$ref": "#/$defs/Part"}},
    }
    assert result["$defs"]["Part"]["properties"] == {"n": {"type": "integer"}}


def test_function_parameters_of_a_local_class_under_future_annotations():
    @dataclasses.dataclass
    class Point:
        x: float

    def move(to: Point, steps: int = 1) -> str:
        return ""

    result = schema.schema_from_function(move)
    assert result["properties"]["to"] == {"$ref": "#/$defs/Point"}
    assert result["required"] == ["to"]
    assert result["$defs"]["Point"]["properties"] == {"x": {"type": "number"}}


def test_a_name_that_exists_nowhere_is_still_a_clear_schema_error():
    @dataclasses.dataclass
    class Broken:
        thing: Nowhere  # noqa: F821

    with pytest.raises(SchemaError, match="cannot resolve the type hints of Broken: .*Nowhere"):
        schema.schema_from_type(Broken)


README_39 = '''
from dataclasses import dataclass
from lattice import schema

@dataclass
class Forecast:
    city: str
    temperature_c: float

print(sorted(schema.schema_from_type(Forecast)["properties"]))
'''


def _python39():
    """A working Python 3.9 (a pyenv shim may exist without being enabled)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
    candidates = sorted(str(p) for p in pyenv.glob("3.9*/bin/python")) if pyenv.is_dir() else []
    for candidate in [*candidates, shutil.which("python3.9")]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.mark.skipif(_python39() is None, reason="no Python 3.9 on this machine")
def test_the_readme_dataclass_under_python_3_9():
    if sys.version_info[:2] == (3, 9):
        pytest.skip("covered by the tests above on this interpreter")
    driver = f"ns = {{'__name__': 'readme'}}\nexec({README_39!r}, ns)\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([_python39(), "-c", driver], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['city', 'temperature_c']"
