"""``OAuth``: an MCP server's 401 turned into a token (OAuth 2.1, as the MCP authorization
specification asks of a client).

The HTTP transport asks two things of it and nothing else does: ``authorization(url)``
(the ``Authorization`` header for a request, refreshing a token about to expire) and
``challenge(url, status, www_authenticate)`` (after a 401 or a 403 ``insufficient_scope``:
get a token, say whether to send again). Behind them: discovery (RFC 9728, RFC 8414 /
OpenID), registration (a given client, a client ID metadata document, or RFC 7591),
authorization code + PKCE through the application's ``redirect_handler`` (or ``finish``
later, for a web app), client credentials (a secret or a private-key JWT), refresh, and
the ``resource`` parameter (RFC 8707) on every request for a token, which is kept for that
resource only. ``_lock`` makes one flow at a time; the token store's ``lock`` (when it has
one) makes one refresh at a time across processes.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlencode, urlsplit

from ._oauth_http import OAuthHTTP
from ._oauth_meta import (
    OAuthFailure,
    canonical_resource,
    client_assertion,
    parse_challenge,
    pkce_pair,
)
from ._tokens import MemoryTokenStore

__all__ = ["OAuth", "OAuthFailure"]

logger = logging.getLogger("lattice.mcp")

_GRANTS = ("authorization_code", "client_credentials")
_EARLY_S = 60  # a token this close to expiring is refreshed before it is sent
_STEP_UPS = 2  # authorizations for a scope already granted, in a row, before giving up


class OAuth:
    """OAuth 2.1 for ``MCPServerHTTP(url, auth=OAuth(...))``.

    Args:
        redirect_handler: ``handler(authorization_url) -> (code, state)`` or ``(code,
            state, iss)``: show the user the URL, return what the redirect brought back.
            None: a web app calls ``finish(code, state, iss)`` later
            (``pending_authorization_url`` says where to send the user).
        redirect_uri: Where the authorization server sends the user back.
        client_id, client_secret: A client registered beforehand (else registration).
        client_metadata_url: A client ID metadata document URL, used as the client id
            where the authorization server supports them.
        private_key: A PEM private key for ``private_key_jwt`` client authentication.
        grant: ``"authorization_code"`` (a user consents) or ``"client_credentials"``.
        scopes: Scopes to ask for when the server names none.
        token_store: Keeps tokens and registrations (``load``/``save``); default: memory.
    """

    def __init__(self, *, redirect_handler: Optional[Callable[[str], Tuple[str, ...]]] = None,
                 redirect_uri: Optional[str] = None, client_id: Optional[str] = None,
                 client_secret: Optional[str] = None,
                 client_metadata_url: Optional[str] = None, private_key: Optional[str] = None,
                 grant: str = "authorization_code", scopes: Optional[List[str]] = None,
                 token_store: Any = None, client_name: str = "lattice") -> None:
        if grant not in _GRANTS:
            raise ValueError(f"grant must be one of {', '.join(_GRANTS)}, got {grant!r}")
        if redirect_handler is not None and not callable(redirect_handler):
            raise ValueError("redirect_handler must be a callable or None")
        for name, value in (("redirect_uri", redirect_uri), ("client_id", client_id),
                            ("client_metadata_url", client_metadata_url),
                            ("client_name", client_name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty str or None, got {value!r}")
        for name, value in (("redirect_uri", redirect_uri),
                            ("client_metadata_url", client_metadata_url)):
            if value is not None and not urlsplit(value).scheme:
                raise ValueError(f"{name} must be an absolute URL, got {value!r}")
        for name, value in (("client_secret", client_secret), ("private_key", private_key)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty str or None")  # not shown
        if scopes is not None and (isinstance(scopes, str) or not hasattr(scopes, "__iter__")
                                   or not all(isinstance(s, str) for s in scopes)):
            raise ValueError(f"scopes must be a list of str or None, got {scopes!r}")
        if grant == "authorization_code" and redirect_uri is None:
            redirect_uri = "http://127.0.0.1:33418/callback"
        if token_store is not None and not (hasattr(token_store, "load")
                                            and hasattr(token_store, "save")):
            raise ValueError("token_store must have load(key) and save(key, value)")
        self.redirect_handler = redirect_handler
        self.redirect_uri = redirect_uri
        self.client_id = client_id
        self._client_secret = client_secret
        self.client_metadata_url = client_metadata_url
        self._private_key = private_key
        self.grant = grant
        self.scopes = list(scopes) if scopes is not None else None
        self.client_name = client_name
        self.token_store = token_store if token_store is not None else MemoryTokenStore()
        self._lock = threading.RLock()
        self._web = OAuthHTTP()
        self._pending: Optional[Dict[str, Any]] = None  # a started code flow (web apps)
        self._step_ups: Dict[str, int] = {}
        self._seen: List[str] = []  # secrets met, for redaction
        self.pending_authorization_url: Optional[str] = None
        self._key = ""  # the store key of the resource being authorized

    def __repr__(self) -> str:
        return f"<OAuth grant={self.grant!r} client_id={self.client_id!r}>"

    # -- what the transport asks ---------------------------------------------------------
    def secrets(self) -> List[str]:
        """Every secret this object holds or held: redacted from errors and logs."""
        found = [s for s in (self._client_secret, *self._seen) if s]
        return sorted(set(found), key=len, reverse=True)

    def authorization(self, url: str) -> Optional[str]:
        """``Bearer <token>`` for a request to ``url``, or None when there is no token for
        that resource yet. A token about to expire is refreshed first."""
        resource = canonical_resource(url)
        state = self.token_store.load(resource)
        tokens = (state or {}).get("tokens")
        if not tokens or tokens.get("resource") != resource:
            return None
        expires = tokens.get("expires_at")
        if expires is not None and time.time() > expires - _EARLY_S:
            with self._lock:
                tokens = self._refresh(resource, tokens) if tokens.get("refresh_token") \
                    else None
            if tokens is None:
                return None
        self._remember(tokens.get("access_token"))
        return f"Bearer {tokens['access_token']}"

    def challenge(self, url: str, status: int, www_authenticate: Optional[str]) -> bool:
        """The server refused (401, or 403 asking for more scope): get a token. True when
        there is a new one to send; raises ``OAuthFailure`` when none can be had."""
        params = parse_challenge(www_authenticate)
        if status == 403 and params.get("error") != "insufficient_scope":
            return False
        resource = canonical_resource(url)
        with self._lock:
            self._key = resource
            state = self.token_store.load(resource) or {}
            tokens = state.get("tokens") or {}
            if status == 403:
                # Asking for scope we lack is progress; asking again for scope we were
                # granted is a loop: only those count against the limit.
                had = set(str(tokens.get("scope") or "").split())
                wanted = set(params.get("scope", "").split())
                count = 0 if wanted - had else self._step_ups.get(resource, 0) + 1
                self._step_ups[resource] = count
                if count >= _STEP_UPS:
                    raise OAuthFailure(f"the server still wants more scope after {_STEP_UPS} "
                                       "new authorizations")
            elif tokens.get("refresh_token") and not tokens.get("refresh_failed"):
                if self._refresh(resource, tokens, after_401=True) is not None:
                    return True
            self._authorize(url, resource, params, status == 403)
            return True

    # -- the flows ------------------------------------------------------------------------
    def _authorize(self, url: str, resource: str, params: Dict[str, str],
                   step_up: bool) -> None:
        prm = self._web.resource_metadata(url, params.get("resource_metadata"))
        servers = prm.get("authorization_servers") if prm else None
        # The resource indicator sent is the one the metadata publishes, byte for byte.
        indicator = prm["resource"] if prm and isinstance(prm.get("resource"), str) \
            else resource
        issuer = servers[0] if isinstance(servers, list) and servers else _origin(url)
        meta = self._web.server_metadata(issuer, strict=prm is not None)
        state = self.token_store.load(resource) or {}
        if state.get("issuer") != issuer:  # a new authorization server: nothing carries over
            state = {"issuer": issuer}
        scope = self._scope(params, prm, meta, state, step_up)
        client = state.get("client") or self._client(meta, scope)
        state["client"] = client
        state["indicator"] = indicator
        self.token_store.save(resource, state)
        if self.grant == "client_credentials":
            form = {"grant_type": "client_credentials", "resource": indicator}
            if scope:
                form["scope"] = scope
        else:
            form = self._consent(meta, client, indicator, scope)
        tokens = self._token_request(meta, client, form, resource)
        if scope and "scope" not in tokens:
            tokens["scope"] = scope
        state["tokens"] = tokens
        self.token_store.save(resource, state)

    def _scope(self, params: Dict[str, str], prm: Optional[Dict[str, Any]],
               meta: Dict[str, Any], state: Dict[str, Any], step_up: bool) -> Optional[str]:
        wanted = params.get("scope")
        if wanted is None and self.scopes:
            wanted = " ".join(self.scopes)
        if wanted is None and prm and isinstance(prm.get("scopes_supported"), list):
            wanted = " ".join(str(s) for s in prm["scopes_supported"])
        if step_up:
            had = ((state.get("tokens") or {}).get("scope") or "").split()
            wanted = " ".join(dict.fromkeys(had + (wanted or "").split()))
        supported = meta.get("scopes_supported")
        if self.grant == "authorization_code" and isinstance(supported, list) \
                and "offline_access" in supported and wanted is not None \
                and "offline_access" not in wanted.split():
            wanted += " offline_access"  # a refresh token, where the server offers one
        return wanted or None

    def _consent(self, meta: Dict[str, Any], client: Dict[str, Any], resource: str,
                 scope: Optional[str]) -> Dict[str, str]:
        endpoint = meta.get("authorization_endpoint")
        if not isinstance(endpoint, str):
            raise OAuthFailure("the authorization server has no authorization_endpoint")
        methods = meta.get("code_challenge_methods_supported")
        if isinstance(methods, list) and "S256" not in methods:
            raise OAuthFailure("the authorization server does not support PKCE with S256")
        verifier, challenge = pkce_pair()
        state = secrets.token_urlsafe(24)
        query = {"response_type": "code", "client_id": client["client_id"],
                 "redirect_uri": self.redirect_uri or "", "code_challenge": challenge,
                 "code_challenge_method": "S256", "state": state, "resource": resource}
        if scope:
            query["scope"] = scope
        sep = "&" if "?" in endpoint else "?"
        address = endpoint + sep + urlencode(query)
        self._remember(verifier, state)
        self._pending = {"state": state, "verifier": verifier, "issuer": meta.get("issuer"),
                         "resource": resource, "key": self._key,
                         "iss_supported": meta.get("authorization_response_iss_parameter_"
                                                   "supported") is True}
        if self.redirect_handler is None:
            self.pending_authorization_url = address
            raise OAuthFailure("the user must authorize: send them to "
                               "oauth.pending_authorization_url, then call oauth.finish(code, "
                               "state)")
        answer = self.redirect_handler(address)
        if not isinstance(answer, tuple) or len(answer) not in (2, 3):
            raise OAuthFailure("redirect_handler must return (code, state) or (code, state, "
                               "iss)")
        code = self._check_redirect(*answer)
        return {"grant_type": "authorization_code", "code": code,
                "redirect_uri": self.redirect_uri or "", "code_verifier": verifier,
                "resource": resource}

    def _check_redirect(self, code: Any, state: Any, iss: Any = None) -> str:
        pending, self._pending = self._pending, None
        if pending is None:
            raise OAuthFailure("no authorization is waiting for its code")
        if not isinstance(code, str) or not code:
            raise OAuthFailure("the redirect brought no authorization code")
        self._remember(code)
        if not isinstance(state, str) or not secrets.compare_digest(state, pending["state"]):
            raise OAuthFailure("the redirect's state is not the one sent (a forged or stale "
                               "redirect)")
        if iss is not None and iss != pending["issuer"]:  # RFC 9207: a plain comparison
            raise OAuthFailure(f"the redirect names issuer {iss!r}, not "
                               f"{pending['issuer']!r} (a mix-up attack?)")
        if iss is None and pending["iss_supported"]:
            raise OAuthFailure("the authorization server promised an iss parameter and the "
                               "redirect has none")
        return code

    def finish(self, code: str, state: str, iss: Optional[str] = None) -> None:
        """The web flow's second half: the redirect came back with ``code`` and ``state``
        (and ``iss``); exchange them for a token. The next request uses it."""
        with self._lock:
            pending = self._pending
            self._check_redirect(code, state, iss)
            assert pending is not None
            resource = pending["key"]
            stored = self.token_store.load(resource) or {}
            meta = self._web.server_metadata(stored["issuer"], strict=False)
            tokens = self._token_request(meta, stored["client"], {
                "grant_type": "authorization_code", "code": code,
                "redirect_uri": self.redirect_uri or "",
                "code_verifier": pending["verifier"], "resource": pending["resource"]},
                resource)
            stored["tokens"] = tokens
            self.token_store.save(resource, stored)
            self.pending_authorization_url = None

    def _refresh(self, resource: str, tokens: Dict[str, Any],
                 after_401: bool = False) -> Optional[Dict[str, Any]]:
        lock = getattr(self.token_store, "lock", None)
        with (lock(resource) if lock is not None else contextlib.nullcontext()):
            state = self.token_store.load(resource) or {}
            stored = state.get("tokens") or {}
            if stored.get("access_token") != tokens.get("access_token"):
                return stored  # another process refreshed it meanwhile
            try:
                meta = self._web.server_metadata(state["issuer"], strict=False)
                fresh = self._token_request(meta, state["client"], {
                    "grant_type": "refresh_token", "refresh_token": stored["refresh_token"],
                    "resource": state.get("indicator", resource)}, resource)
            except (OAuthFailure, KeyError) as exc:
                logger.info("OAuth: refreshing the token failed (%s); authorizing again",
                            exc)
                stored["refresh_failed"] = True
                state["tokens"] = stored
                self.token_store.save(resource, state)
                return None
            fresh.setdefault("refresh_token", stored["refresh_token"])
            fresh.setdefault("scope", stored.get("scope"))
            state["tokens"] = fresh
            self.token_store.save(resource, state)
            return fresh

    # -- registration and tokens ------------------------------------------------------------
    def _client(self, meta: Dict[str, Any], scope: Optional[str]) -> Dict[str, Any]:
        methods = meta.get("token_endpoint_auth_methods_supported")
        if self.client_id is not None:
            if self._private_key is not None:
                method = "private_key_jwt"
            elif self._client_secret is None:
                method = "none"
            elif isinstance(methods, list) and "client_secret_basic" not in methods \
                    and "client_secret_post" in methods:
                method = "client_secret_post"
            else:
                method = "client_secret_basic"
            return {"client_id": self.client_id, "auth_method": method, "given": True}
        if self.client_metadata_url and meta.get("client_id_metadata_document_supported"):
            return {"client_id": self.client_metadata_url, "auth_method": "none"}
        endpoint = meta.get("registration_endpoint")
        if not isinstance(endpoint, str):
            raise OAuthFailure("the authorization server offers no registration, and no "
                               "client_id was given")
        grants = ["client_credentials"] if self.grant == "client_credentials" \
            else ["authorization_code", "refresh_token"]
        body: Dict[str, Any] = {"client_name": self.client_name, "grant_types": grants,
                                "response_types": ["code"] if "authorization_code" in grants
                                else [], "token_endpoint_auth_method": "none"
                                if self.grant == "authorization_code" else
                                "client_secret_basic"}
        if self.redirect_uri:
            body["redirect_uris"] = [self.redirect_uri]
        host = urlsplit(self.redirect_uri or "").hostname or ""
        body["application_type"] = "native" if host in ("localhost", "127.0.0.1", "::1") \
            else "web"
        if scope:
            body["scope"] = scope
        answer = self._web.send("POST", endpoint, json_body=body, what="client registration")
        if not isinstance(answer.get("client_id"), str):
            raise OAuthFailure("the client registration answered no client_id")
        secret = answer.get("client_secret")
        self._remember(secret)
        method = answer.get("token_endpoint_auth_method") or (
            "client_secret_basic" if secret else "none")
        return {"client_id": answer["client_id"], "client_secret": secret,
                "auth_method": method}

    def _token_request(self, meta: Dict[str, Any], client: Dict[str, Any],
                       form: Dict[str, str], resource: str) -> Dict[str, Any]:
        endpoint = meta.get("token_endpoint")
        if not isinstance(endpoint, str):
            raise OAuthFailure("the authorization server has no token_endpoint")
        secret = client.get("client_secret") or (self._client_secret if client.get("given")
                                                 else None)
        method = client.get("auth_method")
        auth: Optional[Tuple[str, str]] = None
        form = dict(form)
        if method == "client_secret_basic" and secret:
            auth = (client["client_id"], secret)
        else:
            form["client_id"] = client["client_id"]
            if method == "client_secret_post" and secret:
                form["client_secret"] = secret
            elif method == "private_key_jwt" and self._private_key is not None:
                assertion = client_assertion(client["client_id"], meta.get("issuer") or
                                             endpoint, self._private_key)
                self._remember(assertion)
                form["client_assertion_type"] = \
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
                form["client_assertion"] = assertion
        answer = self._web.send("POST", endpoint, form=form, auth=auth, what="the token request")
        token = answer.get("access_token")
        if not isinstance(token, str) or not token:
            raise OAuthFailure("the token endpoint answered no access_token")
        self._remember(token, answer.get("refresh_token"))
        tokens: Dict[str, Any] = {"access_token": token, "resource": resource}
        if isinstance(answer.get("refresh_token"), str):
            tokens["refresh_token"] = answer["refresh_token"]
        if isinstance(answer.get("expires_in"), (int, float)):
            tokens["expires_at"] = time.time() + float(answer["expires_in"])
        if isinstance(answer.get("scope"), str):
            tokens["scope"] = answer["scope"]
        return tokens

    def _remember(self, *values: Any) -> None:
        for value in values:
            if isinstance(value, str) and value and value not in self._seen:
                self._seen.append(value)


def _origin(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))

