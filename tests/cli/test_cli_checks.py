"""The command line refuses what it was given wrong in one line (never a traceback, never a
silent default), and ``lattice runs`` lists and shows the durable runs of a session file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from lattice import Agent
from lattice.cli import main
from lattice.stores import create_jsonl_history_store


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_BASE_URL", "LATTICE_MODEL", "LATTICE_PROVIDER", "AWS_REGION",
                 "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key-123")


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize(("args", "says"), [
    (["--base-url", "http://127.0.0.1:99999", "hi"], "--base-url 'http://127.0.0.1:99999' is "
                                                      "not a usable URL: Port out of range"),
    (["--model", "", "hi"], "--model must name a model, got ''"),
    (["--model", "  ", "hi"], "--model must name a model"),
    (["--base-url", "", "hi"], "--base-url must be a URL, got ''"),
])
def test_options_given_wrong_are_one_line_usage_errors(args: List[str], says: str, keyed: None,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(args) == 2
    assert says in one_line_error(capsys)


@pytest.mark.parametrize("region", ["us east 1", "x@127.0.0.1:9/#", "us-east-1/"])
def test_a_bedrock_region_that_is_not_a_region_name_is_one_line(
        region: str, keyed: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_REGION", region)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert main(["--provider", "bedrock", "hi"]) == 2
    assert one_line_error(capsys).endswith(
        f"AWS_REGION must be a region name like us-east-1, got {region!r}")


# -- lattice runs ----------------------------------------------------------------------

def session_with_runs(tmp_path: Path) -> Path:
    path = tmp_path / "talk.jsonl"
    agent = Agent(model="m", model_client=lambda request: "Paris.",
                  history_store=create_jsonl_history_store(path))
    agent.prompt("What is the capital of France?", run_id="run-a")
    agent.prompt("And of Italy?", run_id="run-b")
    return path


def test_runs_lists_the_runs_with_their_state(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = session_with_runs(tmp_path)
    assert main(["runs", "--session", str(path)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert err == "" and len(lines) == 2
    assert lines[0].startswith("run-a  ended (success)") and \
        lines[0].endswith("What is the capital of France?")
    assert lines[1].startswith("run-b  ended (success)")
    assert main(["runs", "--json", "--session", str(path)]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in records] == ["run-a", "run-b"]


def test_runs_shows_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = session_with_runs(tmp_path)
    assert main(["runs", "--session", str(path), "run-b"]) == 0
    out = capsys.readouterr().out
    assert "run:      run-b\n" in out and "state:    ended (success)\n" in out
    assert "prompt:   And of Italy?\n" in out and "result:   Paris.\n" in out
    assert main(["runs", "--json", "--session", str(path), "run-b"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["run_id"] == "run-b" and record["result"]["result"] == "Paris."


def test_runs_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = session_with_runs(tmp_path)
    assert main(["runs", "--session", str(path), "run-typo"]) == 1
    assert one_line_error(capsys).startswith(f"lattice: no run 'run-typo' in {path}")
    missing = tmp_path / "missing.jsonl"
    assert main(["runs", "--session", str(missing)]) == 2
    assert one_line_error(capsys) == f"lattice: --session {missing}: no such session file"
    assert not missing.exists()
    assert main(["runs"]) == 2
    assert "'lattice runs' needs --session FILE.jsonl" in one_line_error(capsys)


def test_runs_of_a_session_without_runs(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.jsonl"
    Agent(model="m", model_client=lambda request: "hi",
          history_store=create_jsonl_history_store(path)).prompt("hello")
    assert main(["runs", "--session", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"no runs in {path}")
