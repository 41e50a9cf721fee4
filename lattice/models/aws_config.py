"""Where ``AnthropicBedrockClient`` finds its AWS credentials and region (no ``botocore``).

Credentials, first found wins: the client's arguments; an explicit ``profile=`` (read from
the shared files); ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``;
the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, default
``~/.aws/credentials``) then the config file (``AWS_CONFIG_FILE``, default
``~/.aws/config``), in the profile ``AWS_PROFILE`` names (else ``default``). Region: the
argument, ``AWS_REGION``, ``AWS_DEFAULT_REGION``, then the profile's ``region`` in the
config file. SSO, ``credential_process`` and instance metadata are not read: pass keys
(or a profile holding them) from whatever fetched them.

Nothing here ever puts a secret in a message.
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

from ..errors import AuthenticationError
from .options import check_secret, secret_from_env
from .sigv4 import Credentials

__all__ = ["resolve_credentials", "resolve_region", "read_profile", "profile_exists"]


def _paths() -> Tuple[str, str]:
    credentials = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials"
    config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    return os.path.expanduser(credentials), os.path.expanduser(config)


# path -> ((mtime_ns, size), sections): a client reads the files at each call (keys
# rotate), and parses them again only when they changed.
_PARSED: Dict[str, Tuple[Tuple[int, int], Dict[str, Dict[str, str]]]] = {}


def _section(path: str, names: Tuple[str, ...]) -> Optional[Dict[str, str]]:
    """The first of the sections ``names`` in the INI file at ``path`` (None if the file
    or the sections are missing)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _PARSED.get(path)
    if cached is None or cached[0] != stamp:
        cached = (stamp, _parse(path))
        _PARSED[path] = cached
    for name in names:
        if name in cached[1]:
            return dict(cached[1][name])
    return None


def _parse(path: str) -> Dict[str, Dict[str, str]]:
    import configparser

    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        # the parser's message may quote a line of the file (a key): only its kind is shown
        raise ValueError(f"AWS shared file {path} cannot be read ({type(exc).__name__})"
                         ) from None
    return {name: {k.lower(): v.strip() for k, v in parser.items(name)}
            for name in parser.sections()}


def read_profile(profile: str) -> Tuple[Optional[Dict[str, str]], Optional[Dict[str, str]]]:
    """The profile's section of the shared credentials file and of the config file."""
    credentials_path, config_path = _paths()
    config_names = ("default", "profile default") if profile == "default" else (
        f"profile {profile}", profile)
    return _section(credentials_path, (profile,)), _section(config_path, config_names)


def profile_exists(profile: str) -> bool:
    return any(section is not None for section in read_profile(profile))


def _from_profile(profile: str) -> Optional[Credentials]:
    for section in read_profile(profile):
        if section and section.get("aws_access_key_id"):
            where = f"profile {profile!r}"
            key_id = check_secret("aws_access_key_id", section.get("aws_access_key_id"), where)
            secret = check_secret("aws_secret_access_key",
                                  section.get("aws_secret_access_key") or None,
                                  f"aws_secret_access_key of {where}")
            if key_id is None or secret is None:
                raise AuthenticationError(f"AWS {where} has aws_access_key_id but no "
                                          "aws_secret_access_key", status_code=None)
            token = section.get("aws_session_token") or section.get("aws_security_token")
            return Credentials(key_id, secret, check_secret(
                "aws_session_token", token or None, f"aws_session_token of {where}"))
    return None


def resolve_credentials(given: Optional[Credentials], profile: Optional[str]) -> Credentials:
    """The credentials to sign with (see the module docstring); ``AuthenticationError``
    (no status) saying where it looked when there are none."""
    if given is not None:
        return given
    if profile is not None:
        found = _from_profile(profile)
        if found is None:
            raise AuthenticationError(f"AWS profile {profile!r} has no aws_access_key_id in "
                                      "the shared credentials or config file",
                                      status_code=None)
        return found
    key_id = secret_from_env("AWS_ACCESS_KEY_ID")
    secret = secret_from_env("AWS_SECRET_ACCESS_KEY")
    if key_id is not None and secret is not None:
        return Credentials(key_id, secret, secret_from_env("AWS_SESSION_TOKEN"))
    name = os.environ.get("AWS_PROFILE", "").strip() or "default"
    found = _from_profile(name)
    if found is None:
        raise AuthenticationError(
            "no AWS credentials: pass access_key_id= and secret_access_key= (or profile=), "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put keys in profile "
            f"{name!r} of the shared credentials file", status_code=None)
    return found


def resolve_region(region: Optional[str], profile: Optional[str]) -> Optional[str]:
    """The region: given, ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's config."""
    for value in (region, os.environ.get("AWS_REGION"), os.environ.get("AWS_DEFAULT_REGION")):
        if value and value.strip():
            return value.strip()
    name = profile or os.environ.get("AWS_PROFILE", "").strip() or "default"
    config = read_profile(name)[1]
    found = (config or {}).get("region", "").strip()
    return found or None
