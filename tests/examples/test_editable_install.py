"""The README's editable install, as a user runs it, leaves ``lattice`` where mypy finds it
in the user's own program (py.typed and all): a fresh venv, the README's first pip command,
then mypy on a small program importing lattice.

Slow (a venv and a pip install, whose build backend pip fetches from PyPI)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

PROGRAM = """\
import lattice

agent: lattice.Agent = lattice.Agent(model="m")
result: lattice.ResultMessage = agent.prompt("hi")
wrong: int = result.result  # a str | None: mypy must know lattice's types to object
"""


def readme_install() -> List[str]:
    """The README's first ``pip install -e .`` command, as words."""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("python3 -m pip install -e . "):
            return shlex.split(line.split("&&")[0])
    raise AssertionError("the README has no 'python3 -m pip install -e .' line")


def test_mypy_finds_lattice_after_the_readmes_editable_install(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    words = readme_install()
    assert words[:5] == ["python3", "-m", "pip", "install", "-e"] and words[5] == "."
    command = [python, *words[1:5], str(ROOT), *words[6:], "--no-deps", "-q"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (tmp_path / "prog.py").write_text(PROGRAM)
    checked = subprocess.run([python, "-m", "mypy", "--no-incremental", "prog.py"],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=600)
    out = checked.stdout
    assert "Cannot find implementation or library stub" not in out, out
    assert "missing library stubs or py.typed" not in out, out
    # it found lattice's types: exactly the planted error, nothing else
    assert "prog.py:5: error: Incompatible types in assignment" in out, out
    assert "Found 1 error" in out, out
