"""Where AnthropicBedrockClient finds credentials and region (lattice/models/aws_config.py):
arguments, an explicit profile, the environment, the shared credentials and config files."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from lattice import AnthropicBedrockClient, AuthenticationError
from lattice.models.aws_config import resolve_credentials, resolve_region
from lattice.models.sigv4 import Credentials

VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
             "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE",
             "AWS_CONFIG_FILE", "ANTHROPIC_BEDROCK_BASE_URL")


@pytest.fixture
def aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "credentials").write_text(
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = default-secret\n\n"
        "[work]\naws_access_key_id=AKIAWORK\naws_secret_access_key=work-secret\n"
        "aws_session_token=work-token\n", encoding="utf-8")
    (tmp_path / "config").write_text(
        "[default]\nregion = eu-west-1\n\n[profile work]\nregion = ap-south-1\n\n"
        "[profile cfgonly]\nregion = us-west-2\naws_access_key_id = AKIACFG\n"
        "aws_secret_access_key = cfg-secret\n\n[profile noregion]\noutput = json\n",
        encoding="utf-8")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    yield tmp_path


def test_arguments_win(aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    given = Credentials("AKIAARG", "arg-secret")
    assert resolve_credentials(given, None) == given
    assert resolve_credentials(given, "work") == given


def test_the_environment_then_the_files(aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_credentials(None, None) == Credentials("AKIADEFAULT", "default-secret")
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert resolve_credentials(None, None) == Credentials("AKIAWORK", "work-secret",
                                                          "work-token")
    monkeypatch.setenv("AWS_PROFILE", "cfgonly")  # keys in the config file are read too
    assert resolve_credentials(None, None) == Credentials("AKIACFG", "cfg-secret")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", " env-secret\n")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    assert resolve_credentials(None, None) == Credentials("AKIAENV", "env-secret", "env-token")


def test_an_explicit_profile_wins_over_the_environment(aws: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    assert resolve_credentials(None, "work").access_key_id == "AKIAWORK"
    client = AnthropicBedrockClient(profile="work")
    assert client.region == "ap-south-1"
    assert client.base_url == "https://bedrock-runtime.ap-south-1.amazonaws.com"
    with pytest.raises(ValueError, match="'nobody' is in neither"):
        AnthropicBedrockClient(profile="nobody", region="us-east-1")
    with pytest.raises(AuthenticationError, match="'noregion' has no aws_access_key_id"):
        resolve_credentials(None, "noregion")


def test_no_credentials_anywhere(aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(aws / "missing"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(aws / "missing"))
    with pytest.raises(AuthenticationError, match="no AWS credentials") as raised:
        resolve_credentials(None, None)
    assert raised.value.status_code is None


def test_the_region_chain(aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_region(None, None) == "eu-west-1"
    assert resolve_region(None, "work") == "ap-south-1"
    assert resolve_region(None, "noregion") is None
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert resolve_region(None, "work") == "us-east-2"
    monkeypatch.setenv("AWS_REGION", "ca-central-1")
    assert resolve_region(None, None) == "ca-central-1"
    assert resolve_region("sa-east-1", None) == "sa-east-1"


def test_bad_options_name_themselves(aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="go together"):
        AnthropicBedrockClient(region="us-east-1", access_key_id="AKIA")
    with pytest.raises(ValueError, match="session_token needs"):
        AnthropicBedrockClient(region="us-east-1", session_token="tok")
    with pytest.raises(ValueError, match="secret_access_key contains control"):
        AnthropicBedrockClient(region="us-east-1", access_key_id="AKIA",
                               secret_access_key="abc\ndef")
    with pytest.raises(ValueError, match="region must be"):
        AnthropicBedrockClient(region="")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(aws / "missing"))
    with pytest.raises(ValueError, match="region: pass region="):
        AnthropicBedrockClient()
    monkeypatch.setenv("ANTHROPIC_BEDROCK_BASE_URL", "https://vpce-1.example.com/")
    assert AnthropicBedrockClient(region="us-east-1").base_url == "https://vpce-1.example.com"


def test_an_unreadable_file_does_not_show_its_lines(aws: Path) -> None:
    (aws / "credentials").write_text("aws_secret_access_key = leaked-secret\n[default\n",
                                     encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        resolve_credentials(None, None)
    assert "leaked-secret" not in str(raised.value)


def test_rotated_keys_in_the_files_are_read_at_the_next_call(aws: Path) -> None:
    assert resolve_credentials(None, None).access_key_id == "AKIADEFAULT"
    (aws / "credentials").write_text(
        "[default]\naws_access_key_id = AKIAROTATED2\naws_secret_access_key = new-secret\n"
        "aws_session_token = new-token\n", encoding="utf-8")
    assert resolve_credentials(None, None) == Credentials("AKIAROTATED2", "new-secret",
                                                          "new-token")
