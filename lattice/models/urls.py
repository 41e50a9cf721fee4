"""Configured URLs and the secrets in them, without any I/O.

A configured URL (a client's ``base_url``, ``default_query``, an MCP server's ``url``) may
carry credentials: a password in its userinfo (which ``requests`` sends as Basic auth) or
a token in its query string. Those never appear in a repr, a log line, an error or a span:

* ``shown_url(url)`` is the URL as lattice shows it: password and every query value ``***``;
* ``url_secrets(url)`` is what to redact from text a server sends back (the password, its
  Basic-auth form, query values);
* ``endpoint(base, path, query)`` puts an API path before a base URL's query string;
* ``hide_queries_from_urllib3(url)`` keeps urllib3's DEBUG request lines (which quote the
  path with its query) free of the URL's query values: a filter on urllib3's loggers.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Any, List, Mapping, Optional, Sequence, Set
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["shown_url", "url_secrets", "endpoint", "redact", "redact_error",
           "hide_queries_from_urllib3", "MASK"]

MASK = "***"
_SHORTEST_QUERY_SECRET = 4  # shorter query values ("1", "true") are redacted in URLs only


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***`` (give the longest secrets first)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_error(error: Any, secrets: Sequence[str]) -> None:
    """Redact ``secrets`` from an error read off a reply: its message and every string
    in its parsed ``body`` (an error event inside a stream may echo the key)."""
    error.message = redact(error.message, secrets)
    error.args = (error.message,)
    if getattr(error, "body", None) is not None:
        error.body = _redact_value(error.body, secrets)


def _redact_value(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {_redact_value(k, secrets): _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(item, secrets) for item in value]
    return value


def _masked_query(query: str) -> str:
    if not query:
        return ""
    pairs = [part.partition("=") for part in query.split("&")]
    return "&".join(name + (f"={MASK}" if sep else "") for name, sep, _ in pairs)


def shown_url(url: str) -> str:
    """``url`` fit to show: the password and every query value replaced by ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, host = netloc.rpartition("@")
            netloc = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, _masked_query(parts.query), ""))
    except ValueError:  # a malformed port or bracket: show nothing of it
        return "(a URL that cannot be parsed)"


def url_secrets(url: str) -> List[str]:
    """What of ``url`` to redact from text: its password (raw and percent-decoded), the
    Basic-auth header value ``requests`` makes of its userinfo, and its query values."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    found: Set[str] = set()
    if password:
        found.update((password, unquote(password)))
        pair = f"{unquote(user or '')}:{unquote(password)}".encode("latin-1", "replace")
        found.add(base64.b64encode(pair).decode("ascii"))
    for _, value in parse_qsl(parts.query, keep_blank_values=True):
        if len(value) >= _SHORTEST_QUERY_SECRET:
            found.update((value, urlencode({"": value})[1:]))
    return sorted(found, key=len, reverse=True)


def endpoint(base_url: str, path: str, query: Optional[Mapping[str, str]] = None) -> str:
    """``base_url`` with ``path`` appended to its path, before its query string (which
    keeps its place), and ``query`` added to that query."""
    parts = urlsplit(base_url)
    merged = parts.query
    if query:
        merged = "&".join(p for p in (merged, urlencode(dict(query))) if p)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, merged,
                       ""))


# -- urllib3's DEBUG lines -------------------------------------------------------------------


class _QueryFilter(logging.Filter):
    """Rewrites urllib3 records that quote a configured URL's query: values become ``***``.

    Records exist only when urllib3's DEBUG (or the retry WARNING) is on, so this costs
    nothing otherwise. ``pairs`` holds the ``name=value`` pairs of configured URLs' query
    strings, as sent."""

    def __init__(self) -> None:
        super().__init__("lattice-query-redaction")
        self.pairs: Set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.pairs:
            if isinstance(record.args, tuple):
                record.args = tuple(self._clean(arg) for arg in record.args)
            elif isinstance(record.msg, str):
                record.msg = self._clean(record.msg)
        return True

    def _clean(self, arg: Any) -> Any:
        if not isinstance(arg, str) or "?" not in arg:
            return arg
        return _QUERY.sub(self._masked, arg)

    def _masked(self, match: re.Match[str]) -> str:
        pairs = self.pairs
        parts = match.group(1).split("&")
        if not any(part in pairs for part in parts):
            return match.group(0)
        return "?" + "&".join(p.partition("=")[0] + (f"={MASK}" if "=" in p else "")
                              for p in parts)


_QUERY = re.compile(r"\?([^\s\"'#<>]+)")
_FILTER = _QueryFilter()
_FILTER_LOCK = threading.Lock()
_URLLIB3_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry")


def hide_queries_from_urllib3(url: str) -> None:
    """From now on, urllib3's log records show ``url``'s query values as ``***`` (in any
    URL holding one of its ``name=value`` pairs)."""
    query = urlsplit(url).query
    if not query:
        return
    with _FILTER_LOCK:
        if not _FILTER.pairs:
            for name in _URLLIB3_LOGGERS:
                logging.getLogger(name).addFilter(_FILTER)
        _FILTER.pairs = _FILTER.pairs | set(query.split("&"))  # replaced whole: no lock
