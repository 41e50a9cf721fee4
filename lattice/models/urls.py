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
import threading
from typing import Any, List, Mapping, Optional, Sequence, Set
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["shown_url", "url_secrets", "endpoint", "redact", "hide_queries_from_urllib3",
           "MASK"]

MASK = "***"
_SHORTEST_QUERY_SECRET = 4  # shorter query values ("1", "true") are redacted in URLs only


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***`` (give the longest secrets first)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


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
    nothing otherwise. ``queries`` holds the query strings of configured URLs."""

    def __init__(self) -> None:
        super().__init__("lattice-query-redaction")
        self.queries: Set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        queries = self.queries
        if queries and isinstance(record.args, tuple):
            record.args = tuple(self._clean(arg, queries) for arg in record.args)
        elif queries and isinstance(record.msg, str):
            record.msg = self._clean(record.msg, queries)
        return True

    @staticmethod
    def _clean(arg: Any, queries: Set[str]) -> Any:
        if not isinstance(arg, str) or "?" not in arg:
            return arg
        for query in list(queries):
            if query in arg:
                arg = arg.replace(query, _masked_query(query))
        return arg


_FILTER = _QueryFilter()
_FILTER_LOCK = threading.Lock()
_URLLIB3_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry")


def hide_queries_from_urllib3(url: str) -> None:
    """From now on, urllib3's log records show ``url``'s query values as ``***``."""
    query = urlsplit(url).query
    if not query:
        return
    with _FILTER_LOCK:
        if not _FILTER.queries:
            for name in _URLLIB3_LOGGERS:
                logging.getLogger(name).addFilter(_FILTER)
        _FILTER.queries = _FILTER.queries | {query}  # replaced whole: readers need no lock
