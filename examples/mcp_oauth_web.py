"""An OAuth-protected MCP server from a web app: the page sends the user to the
authorization server, the callback hands ``code`` and ``state`` to ``oauth.finish``, and the
page lists the server's tools.

    python examples/mcp_oauth_web.py https://mcp.example.com/mcp --port 8000
    python examples/mcp_oauth_web.py            # offline: local servers; open the page
    python examples/mcp_oauth_web.py --demo     # offline, one visit by itself, then exit

``OAuth`` without a ``redirect_handler`` does not wait for the user: the first request
fails with an "auth" ``MCPError`` and ``oauth.pending_authorization_url`` says where to send
the user; ``/callback`` then calls ``oauth.finish(code, state, iss)`` and the next request
has its token. One ``OAuth`` serves this one-user demo; a real app keeps one per user
session (with a ``FileTokenStore`` or its own ``token_store`` to outlive restarts).

With no URL it starts two local servers (examples/_oauth_servers.py, needs the ``mcp``
package): an MCP server protected by the ``mcp`` SDK's own auth and an authorization
server whose consent page has one "Approve" button.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import re
import sys
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from _oauth_servers import consent_fields, server_url

from lattice.mcp import MCPError, MCPServerHTTP, OAuth

StartResponse = Callable[..., Any]


class OAuthApp:
    """``/``: the tools (or a redirect to the authorization server); ``/callback``: the
    authorization server's redirect back."""

    def __init__(self, mcp_url: str, redirect_uri: str) -> None:
        self.mcp_url = mcp_url
        self.oauth = OAuth(redirect_uri=redirect_uri)
        self.lock = threading.Lock()  # one authorization at a time for this one user

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        with self.lock:
            if path == "/":
                return self.home(start_response)
            if path == "/callback":
                return self.callback(parse_qs(environ.get("QUERY_STRING", "")),
                                     start_response)
        return page(start_response, "404 Not Found", "Not found", "<p>Nothing here.</p>")

    def home(self, start_response: StartResponse) -> Iterable[bytes]:
        try:
            with MCPServerHTTP(self.mcp_url, auth=self.oauth) as server:
                tools = server.list_tools()
        except MCPError as exc:
            where = self.oauth.pending_authorization_url
            if exc.kind == "auth" and where:  # the user must authorize first
                start_response("302 Found", [("Location", where), ("Content-Length", "0")])
                return [b""]
            return page(start_response, "502 Bad Gateway", "MCP server error",
                        f"<p id='error'>{html.escape(str(exc))}</p>")
        items = "".join(f"<li class='tool'>{html.escape(t['name'])}: "
                        f"{html.escape(t.get('description') or '')}</li>" for t in tools)
        return page(start_response, "200 OK", "Tools",
                    f"<p>Authorized for {html.escape(self.mcp_url)}.</p><ul>{items}</ul>")

    def callback(self, query: Dict[str, List[str]], start_response: StartResponse
                 ) -> Iterable[bytes]:
        if "error" in query:
            return page(start_response, "403 Forbidden", "Not authorized",
                        f"<p id='error'>{html.escape(query['error'][0])}</p>")
        code, state = query.get("code", [""])[0], query.get("state", [""])[0]
        iss = query.get("iss", [None])[0]
        try:
            self.oauth.finish(code, state, iss)
        except Exception as exc:  # a forged or stale redirect, a refused code: say so
            return page(start_response, "400 Bad Request", "Not authorized",
                        f"<p id='error'>{html.escape(str(exc))}</p>")
        start_response("302 Found", [("Location", "/"), ("Content-Length", "0")])
        return [b""]


def page(start_response: StartResponse, status: str, title: str, body: str
         ) -> Iterable[bytes]:
    data = (f"<!doctype html><html><head><title>{title}</title></head><body>"
            f"<h1>{title}</h1>{body}</body></html>").encode()
    start_response(status, [("Content-Type", "text/html; charset=utf-8"),
                            ("Content-Length", str(len(data)))])
    return [data]


def not_yet(environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    return page(start_response, "503 Service Unavailable", "Starting", "<p>Starting.</p>")


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def demo(base: str) -> List[str]:
    """``--demo``: what a browser does: follow the redirects, press Approve."""
    import requests

    with requests.Session() as browser:
        consent = browser.get(base + "/", timeout=30)
        print(f"sent to the consent page: {consent.url.split('?')[0]}")
        tools = browser.post(consent.url.split("?")[0], data=consent_fields(consent.text),
                             timeout=30)
        print(f"approved; back at {tools.url}")
        return re.findall(r"<li class='tool'>([^:]*):", tools.text)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", help="the MCP server (default: start local ones)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--demo", action="store_true",
                        help="visit the page once on an ephemeral port, then exit")
    args = parser.parse_args(argv)
    port = 0 if args.demo else args.port
    # The app is set once the port is known: the redirect URI names it.
    with server_url(args.url) as url, make_server(
            args.host, port, not_yet, handler_class=QuietHandler) as web:
        base = f"http://{args.host}:{web.server_port}"
        web.set_app(OAuthApp(url, redirect_uri=base + "/callback"))
        if not args.demo:
            print(f"open {base}/ in a browser", file=sys.stderr, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                web.serve_forever()
            return
        thread = threading.Thread(target=web.serve_forever, daemon=True)
        thread.start()
        try:
            print(f"tools: {', '.join(demo(base))}")
        finally:
            web.shutdown()


if __name__ == "__main__":
    main()
