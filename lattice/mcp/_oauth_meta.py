"""OAuth discovery and the wire around it, for ``OAuth``: ``WWW-Authenticate`` parsing,
protected resource metadata (RFC 9728), authorization server metadata (RFC 8414 and
OpenID discovery, in the order the MCP specification gives), PKCE (S256), and the
``private_key_jwt`` client assertion (RFC 7523; signed with ``cryptography`` when it is
installed: it is an optional extra, never a dependency).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

__all__ = ["OAuthFailure", "parse_challenge", "resource_metadata_urls",
           "server_metadata_urls", "pkce_pair", "client_assertion", "canonical_resource",
           "same_resource"]

Getter = Callable[[str], Optional[Dict[str, Any]]]

_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


class OAuthFailure(Exception):
    """Authorization could not be done; the message never holds a secret."""


def parse_challenge(header: Optional[str]) -> Dict[str, str]:
    """The parameters of a ``Bearer`` challenge (``resource_metadata``, ``scope``,
    ``error``...); empty when there is none."""
    if not header:
        return {}
    at = header.lower().find("bearer")
    if at < 0:
        return {}
    rest = header[at + 6:]
    following = re.search(r",\s*[A-Za-z][A-Za-z0-9_-]*\s+[A-Za-z_]", rest)  # another scheme
    if following:
        rest = rest[:following.start()]
    return {name.lower(): (quoted.replace('\\"', '"') if quoted else bare)
            for name, quoted, bare in _PARAM.findall(rest)}


def canonical_resource(url: str) -> str:
    """The server URL as a resource indicator (RFC 8707): no fragment, lower-case scheme
    and host."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, parts.query, ""))


def same_resource(resource: str, url: str) -> bool:
    """Whether metadata naming ``resource`` may be used for ``url``: the same origin and
    a path that is the URL's or a parent of it."""
    a, b = urlsplit(canonical_resource(resource)), urlsplit(canonical_resource(url))
    if (a.scheme, a.netloc) != (b.scheme, b.netloc):
        return False
    base = a.path.rstrip("/")
    return b.path.rstrip("/") == base or b.path.startswith(base + "/")


def resource_metadata_urls(server_url: str, from_header: Optional[str]) -> List[str]:
    """Where to look for the protected resource metadata: the challenge's URL first, then
    the path-aware well-known URL, then the root one (RFC 9728)."""
    parts = urlsplit(server_url)
    urls = [from_header] if from_header else []
    path = parts.path.rstrip("/")
    if path:
        urls.append(urlunsplit((parts.scheme, parts.netloc,
                                "/.well-known/oauth-protected-resource" + path, "", "")))
    urls.append(urlunsplit((parts.scheme, parts.netloc, "/.well-known/oauth-protected-resource",
                            "", "")))
    return urls


def server_metadata_urls(issuer: str) -> List[str]:
    """RFC 8414 then OpenID discovery: with a path, inserted before it, then OpenID's
    appended form; without one, the two root documents."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    root = (parts.scheme, parts.netloc)
    if not path:
        return [urlunsplit(root + (f"/.well-known/{name}", "", ""))
                for name in ("oauth-authorization-server", "openid-configuration")]
    return [urlunsplit(root + ("/.well-known/oauth-authorization-server" + path, "", "")),
            urlunsplit(root + ("/.well-known/openid-configuration" + path, "", "")),
            urlunsplit(root + (path + "/.well-known/openid-configuration", "", ""))]


def pkce_pair() -> Tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(64)[:96]
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def client_assertion(client_id: str, audience: str, private_key: str,
                     algorithm: Optional[str] = None) -> str:
    """A signed JWT saying "I am ``client_id``" to ``audience`` (the token endpoint), for
    ``private_key_jwt`` client authentication: RS256 for an RSA key, ES256 for P-256."""
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils
    except ImportError:
        raise OAuthFailure("private_key needs the cryptography package (pip install "
                           "cryptography) to sign the client assertion") from None
    try:
        key = serialization.load_pem_private_key(private_key.encode("utf-8"), password=None)
    except (ValueError, TypeError):
        raise OAuthFailure("private_key is not an unencrypted PEM private key") from None
    now = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": audience, "iat": now,
              "exp": now + 300, "jti": uuid.uuid4().hex}
    if isinstance(key, rsa.RSAPrivateKey):
        alg = algorithm or "RS256"
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        alg = algorithm or {"secp256r1": "ES256", "secp384r1": "ES384"}.get(key.curve.name,
                                                                            "ES256")
    else:
        raise OAuthFailure("private_key must be an RSA or EC key")
    header = {"alg": alg, "typ": "JWT"}
    signing_input = (_b64(json.dumps(header, separators=(",", ":")).encode()) + "."
                     + _b64(json.dumps(claims, separators=(",", ":")).encode())).encode()
    digest = {"256": hashes.SHA256(), "384": hashes.SHA384()}[alg[-3:]]
    if isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(signing_input, padding.PKCS1v15(), digest)
    else:
        der = key.sign(signing_input, ec.ECDSA(digest))
        r, s = utils.decode_dss_signature(der)
        size = (key.curve.key_size + 7) // 8
        signature = r.to_bytes(size, "big") + s.to_bytes(size, "big")
    return signing_input.decode() + "." + _b64(signature)
