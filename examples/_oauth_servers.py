"""Two local servers for the OAuth examples (and their tests), on 127.0.0.1, offline:

- ``AuthorizationServer``: a small OAuth 2.1 authorization server (RFC 8414 metadata,
  RFC 7591 registration, a consent page with one "Approve" button, the authorization code
  grant with PKCE S256 checked and the resource indicator required, refresh, and RFC 7662
  introspection for the resource server).
- ``protected_mcp_server(issuer)``: an MCP server built with the official ``mcp`` Python
  SDK (``MCPServer`` over Streamable HTTP, served by uvicorn in a thread), protected by the
  SDK's own auth settings: it publishes RFC 9728 metadata naming ``issuer`` and checks each
  bearer token by asking the authorization server (``IntrospectionVerifier``).

Needs the ``mcp`` package (``pip install mcp``); lattice itself does not.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import json
import re
import secrets
import socket
import threading
import time
import urllib.request
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, Optional, Tuple
from urllib.parse import parse_qs, urlencode, urlsplit


class AuthorizationServer(ThreadingHTTPServer):
    """The authorization server. ``with AuthorizationServer() as server: server.base``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AuthHandler)
        self.lock = threading.Lock()
        self.clients: Dict[str, Dict[str, Any]] = {}  # client_id -> registration
        self.codes: Dict[str, Dict[str, str]] = {}  # code -> the authorization request
        self.tokens: Dict[str, Dict[str, Any]] = {}  # access token -> what introspection says
        self.refresh: Dict[str, Dict[str, Any]] = {}  # refresh token -> what it grants
        self.approvals = 0  # how many times the consent button was pressed

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> AuthorizationServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()

    def issue(self, client_id: str, resource: str, scope: str) -> Dict[str, Any]:
        access, refresh = "at-" + secrets.token_urlsafe(16), "rt-" + secrets.token_urlsafe(16)
        grant = {"client_id": client_id, "aud": resource, "scope": scope}
        self.tokens[access] = dict(grant, exp=int(time.time()) + 3600)
        self.refresh[refresh] = grant
        return {"access_token": access, "token_type": "Bearer", "expires_in": 3600,
                "refresh_token": refresh, "scope": scope}


_CONSENT = """<!doctype html><html><head><title>Authorize</title></head><body>
<h1>Authorize {client}</h1><p>{client} asks to use <code>{resource}</code>.</p>
<form method="post" action="/authorize">{fields}
<button id="approve" type="submit">Approve</button></form></body></html>"""


_HIDDEN = re.compile(r'<input type="hidden" name="([^"]*)" value="([^"]*)">')


def consent_fields(page: str) -> Dict[str, str]:
    """The hidden fields of the consent page (what its "Approve" button posts back)."""
    return {html.unescape(k): html.unescape(v) for k, v in _HIDDEN.findall(page)}


class _AuthHandler(BaseHTTPRequestHandler):
    server: AuthorizationServer

    def log_message(self, *args: Any) -> None:
        pass  # quiet: the examples print what matters

    def reply(self, status: int, body: Any = None, headers: Optional[Dict[str, str]] = None,
              content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else (
            b"" if body is None else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def form(self) -> Dict[str, str]:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        return {k: v[0] for k, v in parse_qs(body).items()}

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        base = self.server.base
        if parts.path == "/.well-known/oauth-authorization-server":
            self.reply(200, {
                "issuer": base, "authorization_endpoint": base + "/authorize",
                "token_endpoint": base + "/token", "registration_endpoint": base + "/register",
                "introspection_endpoint": base + "/introspect",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic",
                                                          "client_secret_post"]})
        elif parts.path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            problem = self.bad_request(query)
            if problem:
                self.reply(400, problem, content_type="text/plain")
                return
            fields = "".join(f'<input type="hidden" name="{html.escape(k)}" '
                             f'value="{html.escape(v)}">' for k, v in query.items())
            self.reply(200, _CONSENT.format(client=html.escape(query["client_id"]),
                                            resource=html.escape(query["resource"]),
                                            fields=fields), content_type="text/html")
        else:
            self.reply(404, {"error": "not_found"})

    def bad_request(self, query: Dict[str, str]) -> str:
        client = self.server.clients.get(query.get("client_id", ""))
        if client is None:
            return "unknown client_id"
        if query.get("redirect_uri") not in client["redirect_uris"]:
            return "redirect_uri was not registered"
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return "PKCE with S256 is required"
        if not query.get("resource") or not query.get("state"):
            return "resource and state are required"
        return ""

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path == "/register":
            metadata = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            client_id = "client-" + secrets.token_hex(4)
            registration = {"client_id": client_id, "client_secret": secrets.token_urlsafe(16),
                            "redirect_uris": list(metadata.get("redirect_uris") or []),
                            "token_endpoint_auth_method": "client_secret_basic"}
            self.server.clients[client_id] = registration
            self.reply(201, registration)
        elif path == "/authorize":  # the consent button
            query = self.form()
            problem = self.bad_request(query)
            if problem:
                self.reply(400, problem, content_type="text/plain")
                return
            code = "code-" + secrets.token_urlsafe(12)
            self.server.codes[code] = query
            self.server.approvals += 1
            target = query["redirect_uri"] + ("&" if "?" in query["redirect_uri"] else "?")
            self.reply(302, None, {"Location": target + urlencode(
                {"code": code, "state": query["state"]})})
        elif path == "/token":
            with self.server.lock:
                status, body = self.token(self.form())
            self.reply(status, body)
        elif path == "/introspect":
            token = self.server.tokens.get(self.form().get("token", ""))
            live = token is not None and token["exp"] > time.time()
            self.reply(200, dict(token, active=True) if token and live else {"active": False})
        else:
            self.reply(404, {"error": "not_found"})

    def client(self, form: Dict[str, str]) -> Optional[str]:
        header = self.headers.get("Authorization", "")
        if header.startswith("Basic "):
            who, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        else:
            who, secret = form.get("client_id", ""), form.get("client_secret", "")
        known = self.server.clients.get(who)
        return who if known and secrets.compare_digest(known["client_secret"], secret) else None

    def token(self, form: Dict[str, str]) -> Tuple[int, Dict[str, Any]]:
        server = self.server
        client_id = self.client(form)
        if client_id is None:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") == "authorization_code":
            asked = server.codes.pop(form.get("code", ""), None)
            digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
            challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            if (asked is None or asked["client_id"] != client_id
                    or asked["code_challenge"] != challenge
                    or asked["redirect_uri"] != form.get("redirect_uri")
                    or asked["resource"] != form.get("resource")):
                return 400, {"error": "invalid_grant"}
            return 200, server.issue(client_id, asked["resource"], asked.get("scope", ""))
        if form.get("grant_type") == "refresh_token":
            grant = server.refresh.pop(form.get("refresh_token", ""), None)  # rotated
            if grant is None or grant["client_id"] != client_id:
                return 400, {"error": "invalid_grant"}
            return 200, server.issue(client_id, grant["aud"], grant["scope"])
        return 400, {"error": "unsupported_grant_type"}


class IntrospectionVerifier:
    """The SDK's ``TokenVerifier``: asks the authorization server about each token."""

    def __init__(self, introspection_endpoint: str) -> None:
        self.endpoint = introspection_endpoint

    async def verify_token(self, token: str) -> Any:
        import anyio
        from mcp.server.auth.provider import AccessToken

        answer = await anyio.to_thread.run_sync(self._introspect, token)
        if not answer.get("active"):
            return None
        return AccessToken(token=token, client_id=answer["client_id"],
                           scopes=answer["scope"].split(), expires_at=answer["exp"],
                           resource=answer["aud"])


    def _introspect(self, token: str) -> Dict[str, Any]:
        data = urlencode({"token": token}).encode()
        with urllib.request.urlopen(self.endpoint, data, timeout=10) as answer:
            result: Dict[str, Any] = json.loads(answer.read())
        return result


def _make_mcp_server(issuer: str, url: str) -> Any:
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer

    auth = AuthSettings(issuer_url=issuer, resource_server_url=url,  # type: ignore[arg-type]
                        validate_token_resource=True)
    server = MCPServer("protected-notes", auth=auth, log_level="WARNING",
                       token_verifier=IntrospectionVerifier(issuer + "/introspect"))

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def whoami() -> str:
        """The OAuth client this call was authorized for."""
        token = get_access_token()
        return f"client {token.client_id}" if token else "nobody"

    return server


@contextlib.contextmanager
def protected_mcp_server(issuer: str) -> Iterator[str]:
    """Serve the SDK-protected MCP server; yields its URL (``http://127.0.0.1:PORT/mcp``)."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK's notices about its own future defaults
        app = _make_mcp_server(issuer, url).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise RuntimeError("the protected MCP server did not start")
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@contextlib.contextmanager
def local_servers() -> Iterator[Tuple[AuthorizationServer, str]]:
    """Both servers: yields ``(authorization_server, mcp_url)``."""
    with AuthorizationServer() as authorization, protected_mcp_server(
            authorization.base) as url:
        yield authorization, url


@contextlib.contextmanager
def server_url(given: Optional[str]) -> Iterator[str]:
    """The examples' MCP server: ``given`` if set, else the local servers' (started here)."""
    if given:
        yield given
        return
    with local_servers() as (_, url):
        print(f"offline: local authorization server and SDK-protected MCP server at {url}")
        yield url
