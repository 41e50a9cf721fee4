"""Checks of the options every built-in HTTP client takes, done once, at construction.

Secrets are the delicate part: a key read from a file often ends with a newline, and
``requests`` would reject that header with the value in its message. So keys are stripped
of surrounding whitespace, keys with control characters inside are refused, and no error
here ever shows a secret's value.
"""

from __future__ import annotations

import math
import os
import re
import sys
from typing import Any, Dict, List, Mapping, Optional
from urllib.parse import urlsplit, urlunsplit

from .retry import RetryPolicy
from .urls import shown_url

__all__ = [
    "check_client_options",
    "check_secret",
    "check_version",
    "secret_from_env",
    "clean_headers",
    "resolve_base_url",
    "require_requests",
    "secrets_of",
    "REGION_NAME",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# A cloud region as it goes into a host name (Bedrock, Vertex): letters, digits, dashes;
# anything else ("x@evil.com\\") could send the credential to another host.
REGION_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*", re.IGNORECASE)


def _bad_number(value: Any, minimum: float, *, strict: bool) -> bool:
    """Not a number, NaN, infinite, or below ``minimum`` (at it too when ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if not math.isfinite(value):
        return True
    return value <= minimum if strict else value < minimum


def check_secret(name: str, value: Optional[str], where: str = "") -> Optional[str]:
    """``value`` stripped of surrounding whitespace; ValueError (never showing the value)
    if it is not a non-empty string or holds control characters inside."""
    if value is None:
        return None
    origin = where or name
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{origin} must be a non-empty string or None")
    value = value.strip()
    if _CONTROL.search(value) or not value.isascii():
        raise ValueError(f"{origin} contains control characters or non-ASCII characters "
                         "(value not shown); check where it was read from")
    return value


def secret_from_env(variable: str) -> Optional[str]:
    """The secret in environment ``variable`` (None when unset or blank), checked."""
    raw = os.environ.get(variable)
    if raw is None or not raw.strip():
        return None
    return check_secret(variable, raw, f"environment variable {variable}")


def clean_headers(headers: Optional[Mapping[str, str]], option: str = "default_headers"
                  ) -> Dict[str, str]:
    """A copy of ``headers`` with values stripped; ValueError naming the header (not its
    value) for a name or value that HTTP cannot carry."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise ValueError(f"{option} must be a mapping of str to str")
    cleaned = {}
    for name, value in headers.items():
        if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise ValueError(f"{option} has an invalid header name {name!r}")
        value = value.strip()
        if _CONTROL.search(value):
            raise ValueError(f"{option}[{name!r}] contains a line break or control "
                             "character (value not shown)")
        cleaned[name] = value
    return cleaned


def secrets_of(headers: Mapping[str, str], *values: Optional[str]) -> List[str]:
    """What to redact: the given values and every configured header value (SPEC 16a).

    Only key-like strings (8+ characters) are redacted from messages: a toy key such as
    "k" would mangle every message.
    """
    found = [v for v in values if v and len(v) >= 8]
    found += [v for v in headers.values() if len(v) >= 8]
    return sorted(set(found), key=len, reverse=True)  # longest first: no partial leftovers


def check_client_options(
    *,
    max_retries: Any,
    stream: Any,
    timeout_ms: Any,
    session: Any,
    retry_policy: Any,
    stream_idle_timeout_ms: Any = None,
) -> None:
    """ValueError naming the first option with a bad value."""
    problems = [
        ("max_retries", max_retries, "an int >= 0",
         not isinstance(max_retries, int) or _bad_number(max_retries, 0, strict=False)),
        ("stream", stream, "True or False", not isinstance(stream, bool)),
        ("timeout_ms", timeout_ms, "a positive finite number or None",
         timeout_ms is not None and _bad_number(timeout_ms, 0, strict=True)),
        ("stream_idle_timeout_ms", stream_idle_timeout_ms, "a positive finite number or None",
         stream_idle_timeout_ms is not None
         and _bad_number(stream_idle_timeout_ms, 0, strict=True)),
        ("session", session, "a requests.Session",
         session is not None and not callable(getattr(session, "post", None))),
        ("retry_policy", retry_policy, "a RetryPolicy",
         retry_policy is not None and not isinstance(retry_policy, RetryPolicy)),
    ]
    for name, value, wanted, bad in problems:
        if bad:
            raise ValueError(f"{name} must be {wanted}, got {value!r}")


def check_version(value: Any, option: str = "anthropic_version") -> str:
    """``value`` if it is a non-empty str without whitespace or control characters."""
    if not isinstance(value, str) or not value or not re.fullmatch(r"[\x21-\x7e]+", value):
        raise ValueError(f"{option} must be a non-empty str such as '2023-06-01', "
                         f"got {value!r}")
    return value


def resolve_base_url(base_url: Optional[str], variable: str, default: str) -> str:
    """The base URL: given, else from ``variable``, else ``default``; no trailing slash."""
    if base_url is not None and not isinstance(base_url, str):
        raise ValueError(f"base_url must be a str or None, got {base_url!r}")
    url = base_url if base_url is not None else os.environ.get(variable) or ""
    url = url.strip() or default
    if not re.match(r"https?://[^/\s]", url) or _CONTROL.search(url):
        raise ValueError(f"base_url must be an http(s) URL, got {shown_url(url)!r}")
    parts = urlsplit(url)  # a query string keeps its place after the path (SPEC 16a)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/"), fragment=""))


def require_requests(owner: str) -> None:
    """ImportError with the fix when ``requests`` cannot be imported (say, in a vendored
    copy run without its dependencies), at construction rather than at the first prompt."""
    if "requests" in sys.modules:
        return
    import importlib.util

    try:
        found = importlib.util.find_spec("requests") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(
            f"{owner} needs the 'requests' package, which is not installed: "
            "pip install requests (or install agent-lattice, which depends on it)",
            name="requests",
        )
