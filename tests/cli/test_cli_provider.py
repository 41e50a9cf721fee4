"""``lattice --provider openai`` and ``--base-url`` for Chat Completions servers."""

from __future__ import annotations

import pytest

from lattice.cli.main import main
from lattice.testing import MockMessagesServer


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                 "OPENAI_API_KEY", "OPENAI_BASE_URL", "LATTICE_PROVIDER", "LATTICE_MODEL"):
        monkeypatch.delenv(name, raising=False)


def test_openai_provider_offline_streams_the_reply(no_keys: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", "openai", "--mock", "hello"]) == 0
    out = capsys.readouterr().out
    assert "You said: 'hello'" in out and "gpt-4o-mini" in out


def test_openai_provider_against_a_local_server_needs_no_key(
        no_keys: None, capsys: pytest.CaptureFixture[str]) -> None:
    with MockMessagesServer(["local answer"]) as server:
        assert main(["--provider", "openai", "--base-url", server.base_url + "/v1",
                     "--model", "llama3", "hi"]) == 0
        body = server.requests[0]
        assert body["model"] == "llama3" and body["messages"][-1]["content"] == "hi"
        assert "authorization" not in server.request_headers[0]
    assert "local answer" in capsys.readouterr().out


def test_provider_from_the_environment(no_keys: None, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LATTICE_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-0123456789")
    with MockMessagesServer(["from env"]) as server:
        assert main(["--base-url", server.base_url, "hi"]) == 0
        assert server.request_headers[0]["authorization"] == "Bearer sk-env-key-0123456789"
    assert "from env" in capsys.readouterr().out
    monkeypatch.setenv("LATTICE_PROVIDER", "bogus")
    assert main(["--mock", "hi"]) == 2
    assert "LATTICE_PROVIDER" in capsys.readouterr().err


def test_openai_without_key_or_base_url_says_how_to_fix_it(
        no_keys: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--provider", "openai", "hi"]) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and "--base-url" in err
