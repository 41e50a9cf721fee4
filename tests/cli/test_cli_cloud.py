"""``lattice --provider bedrock|vertex|gemini|vertex-gemini``: offline, against a server,
credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from lattice.cli.main import main
from lattice.testing import MockMessagesServer

VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "LATTICE_PROVIDER", "LATTICE_MODEL",
             "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
             "AWS_REGION", "AWS_DEFAULT_REGION", "ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION",
             "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL", "GEMINI_API_KEY",
             "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GEMINI_BASE_URL")


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))


@pytest.mark.parametrize("provider, model", [
    ("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ("vertex", "claude-sonnet-4-5@20250929"), ("gemini", "gemini-2.5-flash"),
    ("vertex-gemini", "gemini-2.5-flash")])
def test_offline(provider: str, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", provider, "--mock", "hello"]) == 0
    out = capsys.readouterr().out
    assert "You said: 'hello'" in out and model in out


def test_bedrock_against_a_server(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIACLI")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cli-secret-0123456789")
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    monkeypatch.setenv("LATTICE_PROVIDER", "bedrock")
    with MockMessagesServer(["from bedrock"], bedrock_credentials=(
            "AKIACLI", "cli-secret-0123456789")) as server:
        assert main(["--base-url", server.base_url, "--system", "terse", "hi"]) == 0
        assert server.requests[0]["system"] == "terse"
        assert "/eu-central-1/bedrock/aws4_request" in server.request_headers[0]["authorization"]
    assert "from bedrock" in capsys.readouterr().out


def test_vertex_needs_its_settings(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("lattice.models.vertex._has_google_auth", lambda: False)
    assert main(["--provider", "vertex", "hi"]) == 2
    err = capsys.readouterr().err
    assert "ANTHROPIC_VERTEX_PROJECT_ID" in err and "agent-lattice[vertex]" in err


def test_bedrock_needs_credentials_and_a_region(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", "bedrock", "hi"]) == 2
    assert "AWS_ACCESS_KEY_ID" in capsys.readouterr().err
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIACLI")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cli-secret-0123456789")
    assert main(["--provider", "bedrock", "hi"]) == 2
    err = capsys.readouterr().err
    assert "no region" in err and "cli-secret" not in err


def test_gemini_against_a_server(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-cli-key-0123456789")
    with MockMessagesServer(["from gemini"], gemini_key="AIza-cli-key-0123456789") as server:
        assert main(["--provider", "gemini", "--base-url", server.base_url, "--system", "terse",
                     "hi"]) == 0
        assert server.requests[0]["systemInstruction"] == {"parts": [{"text": "terse"}]}
    assert "from gemini" in capsys.readouterr().out


@pytest.mark.parametrize("provider, variable", [("gemini", "GEMINI_API_KEY"),
                                                ("vertex-gemini", "GOOGLE_CLOUD_PROJECT")])
def test_gemini_needs_its_settings(provider: str, variable: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", provider, "hi"]) == 2
    assert variable in capsys.readouterr().err
