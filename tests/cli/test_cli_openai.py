"""``lattice --provider openai-responses|azure``: offline, against a server, credentials."""

from __future__ import annotations

import pytest

from lattice.cli.main import main
from lattice.testing import MockMessagesServer


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY",
                 "OPENAI_BASE_URL", "LATTICE_PROVIDER", "LATTICE_MODEL", "AZURE_OPENAI_ENDPOINT",
                 "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_DEPLOYMENT", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("provider, key", [("openai-responses", "OPENAI_API_KEY"),
                                           ("azure", "AZURE_OPENAI_API_KEY")])
def test_offline(provider: str, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", provider, "--mock", "hello"]) == 0
    out = capsys.readouterr().out
    assert "You said: 'hello'" in out and key in out


def test_responses_against_a_server(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0123456789")
    with MockMessagesServer(["from responses"]) as server:
        assert main(["--provider", "openai-responses", "--base-url", server.base_url,
                     "--model", "gpt-5", "--system", "terse", "hi"]) == 0
        body = server.requests[0]
        assert body["model"] == "gpt-5" and body["instructions"] == "terse"
        assert body["input"] == [{"role": "user", "content": "hi"}]
        assert server.request_headers[0]["authorization"] == "Bearer sk-env-key-0123456789"
    assert "from responses" in capsys.readouterr().out


def test_azure_reads_its_environment(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with MockMessagesServer(["from azure"]) as server:
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.base_url)
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-env-key-0123")
        monkeypatch.setenv("AZURE_OPENAI_DEPLOYMENT", "prod-gpt4o")
        monkeypatch.setenv("OPENAI_API_VERSION", "2025-01-01-preview")
        monkeypatch.setenv("LATTICE_PROVIDER", "azure")
        assert main(["hi"]) == 0
        assert server.request_headers[0]["api-key"] == "azure-env-key-0123"
        assert server.requests[0]["model"] == "prod-gpt4o"
    assert "from azure" in capsys.readouterr().out


@pytest.mark.parametrize("provider, words", [("openai-responses", "OPENAI_API_KEY"),
                                             ("azure", "AZURE_OPENAI_ENDPOINT")])
def test_missing_credentials_say_how_to_fix_it(provider: str, words: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", provider, "hi"]) == 2
    assert words in capsys.readouterr().err
