"""What the ``lattice`` command says when something is missing or off: a package it needs,
an empty stdin, the key to set after ``--mock``, its version."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from lattice import __version__
from lattice.cli.main import main

ROOT = Path(__file__).resolve().parents[2]

# Run the CLI in a Python where ``requests`` cannot be found, as in a venv without it.
NO_REQUESTS = """
import importlib.abc, sys
class NoRequests(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "requests" or name.startswith("requests."):
            raise ModuleNotFoundError("No module named 'requests'", name="requests")
        return None
sys.meta_path.insert(0, NoRequests())
for name in [n for n in sys.modules if n == "requests" or n.startswith("requests.")]:
    del sys.modules[name]
from lattice.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def env() -> Dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "LATTICE_"))}
    out["PYTHONPATH"] = str(ROOT)
    return out


def test_without_requests_one_clear_line() -> None:
    done = subprocess.run([sys.executable, "-c", NO_REQUESTS, "--mock", "hi"], env=env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("lattice: ") and "pip install requests" in done.stderr


def test_an_empty_stdin_says_so(capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("  \n"))
    assert main(["--mock", "-"]) == 2
    err = capsys.readouterr().err
    assert "stdin held no text" in err
    assert "give a prompt" not in err  # the user did: '-'


@pytest.mark.parametrize("provider, key", [("openai", "OPENAI_API_KEY"),
                                           ("anthropic", "ANTHROPIC_API_KEY")])
def test_the_mock_names_the_key_of_the_chosen_provider(
        provider: str, key: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LATTICE_MODEL", raising=False)
    assert main(["--mock", "--provider", provider, "hi"]) == 0
    out = capsys.readouterr().out
    assert f"set {key} to talk to" in out
    other = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} - {key}
    assert other.pop() not in out


def test_the_mock_answers_every_prompt_of_a_chat(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO("one\ntwo\nthree\n"))
    assert main(["--mock", "chat"]) == 0
    out = capsys.readouterr().out
    assert "That is prompt 3 of this conversation" in out


def test_version_is_the_release_being_built(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"lattice {__version__}"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    newest = re.search(r"^## (\d+\.\d+\.\d+)", changelog, re.M)
    assert newest is not None and newest.group(1) == __version__ == "0.3.0"
