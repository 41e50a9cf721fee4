"""lattice.schema against the official JSON-Schema-Test-Suite (read from ../shared, never copied).

Required tests must all pass for drafts 2020-12 and 7, through ``is_valid`` (compiled and
cached) and through ``validate`` (whose error path must agree with the fast path). Tests
that need the suite's ``remotes/`` documents (served at localhost:1234 upstream) are left
out, as the shared harness does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import NO_SHARED, SHARED
from suite_adapter import needs_remote

from lattice import schema

SUITE = SHARED / "data/JSON-Schema-Test-Suite/tests"
DRAFTS = {"2020-12": "draft2020-12", "7": "draft7"}
GENERIC = "instance does not match the schema"

pytestmark = pytest.mark.skipif(not SUITE.is_dir(), reason=NO_SHARED)


def _files(draft: str, section: str = "") -> list[Path]:
    root = SUITE / DRAFTS[draft] / section
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("*.json") if p.name != "refRemote.json")


def _cases(path: Path, draft: str) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [c for c in json.load(fh) if not needs_remote(c["schema"], draft)]


def _run(path: Path, draft: str, format_checker: bool = False) -> list[str]:
    failures = []
    for case in _cases(path, draft):
        validator = schema.compile(case["schema"], draft=draft, format_checker=format_checker)
        for test in case["tests"]:
            got = validator.is_valid(test["data"])
            # The error-collecting path must find a concrete reason whenever the fast path
            # says no (the generic fallback message would mean the two paths disagree).
            errors = [e.message for e in validator.errors(test["data"])]
            if got != test["valid"] or bool(errors) == got or GENERIC in errors:
                failures.append(f"{case['description']} / {test['description']}: got {got}")
    return failures


@pytest.mark.parametrize("path", _files("2020-12"), ids=lambda p: p.stem)
def test_required_2020_12(path: Path) -> None:
    assert _run(path, "2020-12") == []


@pytest.mark.parametrize("path", _files("7"), ids=lambda p: p.stem)
def test_required_draft7(path: Path) -> None:
    assert _run(path, "7") == []


# Python's ``re`` has no variable-width lookbehind; everything else in optional/format passes.
KNOWN_FORMAT_GAPS = {
    "ECMA 262 lookbehind is valid, including variable width / "
    "a variable-width lookbehind (ES2018): got False"
}


@pytest.mark.parametrize("draft", ["2020-12", "7"])
def test_optional_formats(draft: str) -> None:
    failures = [f for p in _files(draft, "optional/format") for f in _run(p, draft, True)]
    assert set(failures) <= KNOWN_FORMAT_GAPS


def test_optional_2020_12_non_format() -> None:
    failures = [f for p in _files("2020-12", "optional") for f in _run(p, "2020-12")]
    assert failures == []


def _every_file(draft: str) -> list[Path]:
    root = SUITE / DRAFTS[draft]
    return sorted(root.rglob("*.json")) if root.is_dir() else []


@pytest.mark.parametrize("draft", ["2020-12", "7"])
@pytest.mark.parametrize("format_checker", [False, True])
def test_fast_path_and_error_path_agree_on_every_case(draft: str, format_checker: bool) -> None:
    """``is_valid`` (the fast path) and ``errors``/``validate`` (the error-collecting path)
    are built separately; they must give the same verdict on every suite case, required
    and optional, whether or not it is the verdict the suite expects."""
    disagreements = []
    checked = 0
    for path in _every_file(draft):
        for case in json.loads(path.read_text(encoding="utf-8")):
            if needs_remote(case["schema"], draft):
                continue
            validator = schema.compile(case["schema"], draft=draft, format_checker=format_checker)
            for test in case["tests"]:
                fast = validator.is_valid(test["data"])
                errors = validator.errors(test["data"])
                try:
                    validator.validate(test["data"])
                    raised = False
                except schema.ValidationError:
                    raised = True
                checked += 1
                if fast != (not errors) or raised == fast:
                    disagreements.append(f"{path.name}: {case['description']} / "
                                         f"{test['description']}: is_valid={fast}, {errors}")
    assert disagreements == []
    assert checked > (1200 if draft == "2020-12" else 900)
