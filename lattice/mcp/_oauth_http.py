"""The HTTP side of ``OAuth``: metadata documents fetched and checked (a resource's
metadata must name this resource; an authorization server's must name the issuer asked),
and requests to the authorization server, through lattice's HTTP stack (``requests``,
imported when the first is made). Errors name what failed, never a secret."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple

from ._oauth_meta import OAuthFailure, resource_metadata_urls, same_resource, server_metadata_urls

__all__ = ["OAuthHTTP"]

logger = logging.getLogger("lattice.mcp")

_HTTP_S = 30.0


class OAuthHTTP:
    def __init__(self) -> None:
        self._http: Any = None

    def resource_metadata(self, url: str, from_header: Optional[str]
                           ) -> Optional[Dict[str, Any]]:
        for address in resource_metadata_urls(url, from_header):
            found = self.get(address)
            if found is None:
                continue
            named = found.get("resource")
            if isinstance(named, str) and not same_resource(named, url):
                raise OAuthFailure(f"the protected resource metadata is for {named!r}, not "
                                   "this server: no token is sent to another resource")
            return found
        return None

    def server_metadata(self, issuer: str, strict: bool) -> Dict[str, Any]:
        for address in server_metadata_urls(issuer):
            found = self.get(address)
            if found is None:
                continue
            if found.get("issuer") != issuer and found.get("issuer") != issuer.rstrip("/"):
                raise OAuthFailure(f"the authorization server metadata names issuer "
                                   f"{found.get('issuer')!r}, not {issuer!r}")
            return found
        if strict:
            raise OAuthFailure(f"no authorization server metadata found for {issuer!r}")
        base = issuer.rstrip("/")  # 2025-03-26 servers: the default endpoints
        return {"issuer": issuer, "authorization_endpoint": base + "/authorize",
                "token_endpoint": base + "/token", "registration_endpoint": base + "/register"}

    def _session(self) -> Any:
        if self._http is None:
            from ..models.http import new_session

            self._http = new_session("https://example.invalid/")
        return self._http

    def get(self, url: str) -> Optional[Dict[str, Any]]:
        try:
            response = self._session().get(url, headers={"Accept": "application/json"},
                                           timeout=_HTTP_S, allow_redirects=False)
        except Exception as exc:  # a well-known URL that cannot be reached: the next one
            logger.debug("OAuth: GET %s failed: %s", url, type(exc).__name__)
            return None
        with response:
            if response.status_code != 200:
                return None
            try:
                found = response.json()
            except ValueError:
                return None
        return found if isinstance(found, dict) else None

    def send(self, verb: str, url: str, *, what: str, json_body: Any = None,
              form: Optional[Dict[str, str]] = None,
              auth: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
        headers = {"Accept": "application/json"}
        if auth is not None:
            from urllib.parse import quote

            from requests.auth import _basic_auth_str

            headers["Authorization"] = _basic_auth_str(quote(auth[0], safe=""),
                                                       quote(auth[1], safe=""))
        try:
            response = self._session().request(verb, url, json=json_body, data=form,
                                               headers=headers, timeout=_HTTP_S,
                                               allow_redirects=False)
        except Exception as exc:
            raise OAuthFailure(f"{what} could not be sent ({type(exc).__name__})") from None
        with response:
            try:
                answer = response.json()
            except ValueError:
                answer = None
        if response.status_code >= 400 or not isinstance(answer, dict):
            error = answer.get("error") if isinstance(answer, dict) else None
            raise OAuthFailure(f"{what} failed: HTTP {response.status_code}"
                               + (f" ({error})" if isinstance(error, str) else ""))
        return answer

