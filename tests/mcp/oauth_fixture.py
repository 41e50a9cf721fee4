"""A protected MCP server and its authorization server in one local HTTP server (127.0.0.1),
strict where a client can go wrong: PKCE S256 checked, the resource indicator required,
client secrets checked, refresh tokens rotated (a spent one is refused), tokens expire.
Run as a script (``python oauth_fixture.py URL STORE``) it is a second process asking a
``FileTokenStore`` for a token (the refresh race test)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional
from urllib.parse import parse_qs, urlencode, urlsplit

import requests


class AuthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, expires_in: int = 3600, refreshed_expires_in: int = 3600) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.expires_in = expires_in
        self.refreshed_expires_in = refreshed_expires_in
        self.lock = threading.Lock()
        self.clients: Dict[str, str] = {}  # client_id -> secret
        self.codes: Dict[str, Dict[str, str]] = {}
        self.tokens: Dict[str, str] = {}  # access token -> scope
        self.refresh: Dict[str, bool] = {}  # refresh token -> still good
        self.log: List[Dict[str, Any]] = []  # what the client sent the token endpoint
        self.refreshes = 0
        self.open = False  # True: /mcp takes any request (an unprotected server, to compare)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    def __enter__(self) -> AuthServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()

    def issue(self, refreshed: bool = False) -> Dict[str, Any]:
        access, refresh = "at-" + secrets.token_hex(12), "rt-" + secrets.token_hex(12)
        self.tokens[access] = "mcp"
        self.refresh[refresh] = True
        return {"access_token": access, "token_type": "Bearer", "refresh_token": refresh,
                "expires_in": self.refreshed_expires_in if refreshed else self.expires_in,
                "scope": "mcp"}


class _Handler(BaseHTTPRequestHandler):
    server: AuthServer

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, status: int, body: Any = None, headers: Optional[Dict[str, str]] = None
             ) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        base = self.server.base
        if path == "/.well-known/oauth-protected-resource/mcp":
            self.send(200, {"resource": self.server.url, "authorization_servers": [base],
                            "scopes_supported": ["mcp"]})
        elif path == "/.well-known/oauth-authorization-server":
            self.send(200, {"issuer": base, "authorization_endpoint": base + "/authorize",
                            "token_endpoint": base + "/token",
                            "registration_endpoint": base + "/register",
                            "code_challenge_methods_supported": ["S256"],
                            "token_endpoint_auth_methods_supported": ["client_secret_basic"]})
        elif path == "/authorize":
            query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
            assert query["code_challenge_method"] == "S256" and query["resource"]
            code = "code-" + secrets.token_hex(8)
            self.server.codes[code] = query
            target = query["redirect_uri"] + "?" + urlencode({"code": code,
                                                              "state": query["state"]})
            self.send(302, None, {"Location": target})
        elif path == "/mcp":
            self.send(405)
        else:
            self.send(404)

    def client(self) -> Optional[str]:
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        who, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        return who if self.server.clients.get(who) == secret else None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urlsplit(self.path).path
        server = self.server
        if path == "/register":
            client_id, secret = "client-" + secrets.token_hex(4), "cs-" + secrets.token_hex(8)
            server.clients[client_id] = secret
            self.send(201, {"client_id": client_id, "client_secret": secret,
                            "token_endpoint_auth_method": "client_secret_basic"})
        elif path == "/token":
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            server.log.append(form)
            with server.lock:
                if self.client() is None or form.get("resource") != server.url:
                    self.send(401, {"error": "invalid_client"})
                elif form["grant_type"] == "authorization_code":
                    asked = server.codes.pop(form.get("code", ""), None)
                    digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
                    challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
                    if asked is None or asked["code_challenge"] != challenge:
                        self.send(400, {"error": "invalid_grant"})
                    else:
                        self.send(200, server.issue())
                elif form["grant_type"] == "refresh_token":
                    if not server.refresh.get(form.get("refresh_token", "")):
                        self.send(400, {"error": "invalid_grant"})
                    else:
                        server.refresh[form["refresh_token"]] = False  # rotated
                        server.refreshes += 1
                        self.send(200, server.issue(refreshed=True))
                else:
                    self.send(400, {"error": "unsupported_grant_type"})
        elif path == "/mcp":
            self.mcp(json.loads(body))
        else:
            self.send(404)

    def mcp(self, message: Dict[str, Any]) -> None:
        token = self.headers.get("Authorization", "")[7:]
        if token not in self.server.tokens and not self.server.open:
            metadata = self.server.base + "/.well-known/oauth-protected-resource/mcp"
            self.send(401, {"error": "unauthorized"}, {
                "WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'})
            return
        method = message.get("method")
        if method == "server/discover":
            self.send(200, {"jsonrpc": "2.0", "id": message["id"],
                            "error": {"code": -32601, "message": "Method not found"}})
        elif method == "initialize":
            self.send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "protected", "version": "1"}}})
        elif "id" not in message:
            self.send(202)
        elif method == "tools/list":
            self.send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [
                {"name": "whoami", "inputSchema": {"type": "object"}}]}})
        elif (message.get("params") or {}).get("name") == "echo_auth":  # a leaky server
            self.send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [
                {"type": "text", "text": "you sent " + self.headers.get("Authorization", "")}]}})
        else:
            self.send(200, {"jsonrpc": "2.0", "id": message["id"], "result": {"content": [
                {"type": "text", "text": "you are authorized"}]}})


def follow(url: str) -> tuple:
    """The user's consent: the fixture approves at once and redirects with the code."""
    location = requests.get(url, allow_redirects=False, timeout=10).headers["Location"]
    query = parse_qs(urlsplit(location).query)
    return query["code"][0], query["state"][0]


if __name__ == "__main__":  # a second process: the token for URL, from the file STORE
    from lattice.mcp import FileTokenStore, OAuth

    auth = OAuth(redirect_handler=follow, token_store=FileTokenStore(sys.argv[2]))
    print(auth.authorization(sys.argv[1]))
