"""AWS Signature Version 4, written here so that Bedrock needs no ``botocore``.

``sign_headers(...)`` returns the headers that sign one request (``x-amz-date``,
``x-amz-security-token`` with a session token, ``authorization``); the pieces it is made of
(``canonical_request``, ``string_to_sign``, ``signing_key``) are public so tests and the
mock server can check each step. The rules, as AWS documents them for every service but S3:

* the canonical URI is the path *as sent* (already percent-encoded), with dot segments and
  doubled slashes removed, then percent-encoded once more (``%3A`` becomes ``%253A``);
* query parameters are decoded, re-encoded with RFC 3986's unreserved set, and sorted by
  name, then value;
* header names are lower-cased, values trimmed with inner runs of spaces collapsed; every
  header given is signed except the hop-by-hop ones a proxy may rewrite (and
  ``user-agent``), and ``host`` is always signed;
* the payload is its SHA-256, in hex.

No secret is kept in anything this module returns but the ``authorization`` header, which
carries only the signature.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import threading
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "Credentials",
    "sign_headers",
    "canonical_request",
    "string_to_sign",
    "signing_key",
    "host_of",
    "amz_date",
    "UNSIGNED_HEADERS",
]

ALGORITHM = "AWS4-HMAC-SHA256"
# Headers a proxy or the HTTP library may add, drop or rewrite: never signed (as botocore).
UNSIGNED_HEADERS = frozenset([
    "connection", "expect", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "user-agent", "x-amzn-trace-id", "authorization",
])


class Credentials(NamedTuple):
    """An AWS key pair, with the session token of temporary credentials; the repr shows
    only the access key id (which is not a secret) and whether a token is present."""

    access_key_id: str
    secret_access_key: str
    session_token: Optional[str] = None

    def __repr__(self) -> str:
        token = ", session_token=<set>" if self.session_token else ""
        return f"Credentials(access_key_id={self.access_key_id!r}, secret_access_key=<set>{token})"


def amz_date(now: datetime.datetime) -> str:
    """``now`` (aware, or naive UTC) as SigV4's ``YYYYMMDDTHHMMSSZ``."""
    if now.tzinfo is not None:
        now = now.astimezone(datetime.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def host_of(url: str) -> str:
    """The ``host`` header an HTTP client sends for ``url``: lower case, the port only when
    it is not the scheme's default, no user info."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is not None and port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{port}"
    return host


def _canonical_path(path: str) -> str:
    segments: List[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment and segment != ".":
            segments.append(segment)
    if not path:
        return "/"
    normal = ("/" if path.startswith("/") else "") + "/".join(segments)
    if path.endswith("/") and segments:
        normal += "/"
    return quote(normal or "/", safe="/~")


def _canonical_query(query: str) -> str:
    pairs: List[Tuple[str, str]] = []
    for item in query.split("&"):
        if not item:
            continue
        name, _, value = item.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _signed(headers: Mapping[str, str]) -> Dict[str, str]:
    """Lower-case name -> trimmed value of the headers that are signed."""
    found: Dict[str, List[str]] = {}
    for name, value in headers.items():
        key = name.lower().strip()
        if key not in UNSIGNED_HEADERS:
            found.setdefault(key, []).append(" ".join(str(value).split()))
    return {name: ",".join(values) for name, values in found.items()}


def canonical_request(method: str, url: str, headers: Mapping[str, str],
                      payload_hash: str) -> Tuple[str, str]:
    """The canonical request and the ``SignedHeaders`` list, for ``headers`` as sent
    (``host`` among them, or taken from ``url``)."""
    parts = urlsplit(url)
    signed = _signed(headers)
    signed.setdefault("host", host_of(url))
    names = sorted(signed)
    lines = [method.upper(), _canonical_path(parts.path), _canonical_query(parts.query)]
    lines += [f"{name}:{signed[name]}" for name in names]
    signed_names = ";".join(names)
    lines += ["", signed_names, payload_hash]
    return "\n".join(lines), signed_names


def string_to_sign(timestamp: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{timestamp}\n{scope}\n{digest}"


_KEYS: Dict[Tuple[str, str, str, str], bytes] = {}
_KEYS_LOCK = threading.Lock()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The derived key: HMAC chain over date, region, service and ``aws4_request``
    (cached: it changes once a day per region)."""
    cache_key = (secret, date, region, service)
    key = _KEYS.get(cache_key)
    if key is None:
        key = ("AWS4" + secret).encode("utf-8")
        for part in (date, region, service, "aws4_request"):
            key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
        with _KEYS_LOCK:
            if len(_KEYS) > 64:
                _KEYS.clear()
            _KEYS[cache_key] = key
    return key


def sign_headers(method: str, url: str, headers: Mapping[str, str], body: bytes, *,
                 credentials: Credentials, region: str, service: str,
                 now: Optional[datetime.datetime] = None) -> Dict[str, str]:
    """The headers to add to ``headers`` so that the request is signed: ``x-amz-date``,
    ``x-amz-security-token`` (with a session token) and ``authorization``.

    ``headers`` are those the request will carry (any ``authorization``, ``x-amz-date``
    or ``x-amz-security-token`` in them is replaced); ``now`` defaults to the current time.
    """
    timestamp = amz_date(now or datetime.datetime.now(datetime.timezone.utc))
    added = {"x-amz-date": timestamp}
    if credentials.session_token:
        added["x-amz-security-token"] = credentials.session_token
    replaced = {"authorization", "x-amz-date", "x-amz-security-token"}
    to_sign = {k: v for k, v in headers.items() if k.lower() not in replaced}
    to_sign.update(added)
    canonical, signed_names = canonical_request(method, url, to_sign,
                                                hashlib.sha256(body).hexdigest())
    scope = f"{timestamp[:8]}/{region}/{service}/aws4_request"
    key = signing_key(credentials.secret_access_key, timestamp[:8], region, service)
    signature = hmac.new(key, string_to_sign(timestamp, scope, canonical).encode("utf-8"),
                         hashlib.sha256).hexdigest()
    added["authorization"] = (f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
                              f"SignedHeaders={signed_names}, Signature={signature}")
    return added
