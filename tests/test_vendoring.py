"""lattice can be vendored: copied into another package and imported from there.

That needs relative imports only (an absolute ``import lattice`` inside the package would
load a second, installed copy, or fail) and package data found relative to the code (the
JSON Schema meta-schemas), not through the installed distribution.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lattice"

# Runs inside myapp, with only the temporary folder on the path.
VENDORED_USE = r'''
import json
import sys

from myapp._vendor import lattice
from myapp._vendor.lattice import Agent, tool, schema
from myapp._vendor.lattice.testing import ScriptedModelClient


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


client = ScriptedModelClient([
    {"content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}]},
    "5",
])
agent = Agent(model="test", model_client=client, tools=[add])
result = agent.prompt("2 + 3?")
tool_result = agent.get_history()[2]["content"][0]["content"]

# A schema that refs the bundled draft 2020-12 meta-schema: validating against it reads
# the package data of the vendored copy.
meta = {"$ref": "https://json-schema.org/draft/2020-12/schema"}
print(json.dumps({
    "file": lattice.__file__,
    "result": result.result,
    "tool_result": tool_result,
    "good_schema_ok": schema.is_valid({"type": "object", "minProperties": 1}, meta),
    "bad_schema_ok": schema.is_valid({"type": "object", "minProperties": -1}, meta),
    "top_level": sorted(m for m in sys.modules if m == "lattice" or m.startswith("lattice.")),
    "vendored": sum(1 for m in sys.modules if m.startswith("myapp._vendor.lattice")),
}))
'''


def test_vendored_copy_runs_on_its_own(tmp_path: Path) -> None:
    vendor = tmp_path / "myapp" / "_vendor"
    shutil.copytree(PACKAGE, vendor / "lattice",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (vendor / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(tmp_path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-c", VENDORED_USE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)

    assert Path(report["file"]).resolve().is_relative_to(tmp_path.resolve())
    assert report["top_level"] == [], "the vendored copy imported a top-level lattice"
    assert report["vendored"] > 10
    assert report["result"] == "5"
    assert report["tool_result"] == "5"
    assert report["good_schema_ok"] is True
    assert report["bad_schema_ok"] is False


def absolute_self_imports(path: Path, root: Path = ROOT) -> List[str]:
    """``import lattice...``/``from lattice... import`` statements in one module (docstrings
    and comments that merely mention them do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name == "lattice" or name.startswith("lattice."):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return found


def test_package_imports_itself_relatively() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 20
    offenders = [hit for module in modules for hit in absolute_self_imports(module)]
    assert not offenders, "use relative imports inside lattice/:\n" + "\n".join(offenders)


def test_the_check_catches_absolute_imports(tmp_path: Path) -> None:
    module = tmp_path / "lattice" / "bad.py"
    module.parent.mkdir()
    module.write_text('"""from lattice import x (a docstring)"""\n'
                      "import json, lattice.errors\nfrom lattice import tools\n"
                      "from . import fine\n")
    hits = absolute_self_imports(module, tmp_path)
    assert [h.split(": ")[1] for h in hits] == ["lattice.errors", "lattice"]
