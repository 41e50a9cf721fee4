"""An OAuth-protected MCP server from a terminal: print the authorization URL, let the user
open it in a browser and approve, read the URL the browser was redirected to, go on.

    python examples/mcp_oauth_cli.py https://mcp.example.com/mcp
    python examples/mcp_oauth_cli.py            # offline: local servers, you approve
    python examples/mcp_oauth_cli.py --demo     # offline, and it approves by itself

The redirect URI is a local address nothing listens on: after approving, the browser shows
"cannot connect", and its address bar holds the ``code`` and ``state`` to paste here.

With no URL it starts two local servers (examples/_oauth_servers.py, needs the ``mcp``
package): an MCP server protected by the ``mcp`` SDK's own auth and an authorization
server whose consent page has one "Approve" button.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from _oauth_servers import consent_fields, server_url

from lattice.mcp import MCPError, MCPServerHTTP, OAuth

REDIRECT_URI = "http://127.0.0.1:8976/callback"  # a loopback redirect (RFC 8252)


def code_and_state(redirect: str) -> Tuple[str, str]:
    """The ``code`` and ``state`` from the URL the browser landed on."""
    query = parse_qs(urlsplit(redirect.strip()).query)
    if "error" in query:
        raise ValueError(f"authorization refused: {query['error'][0]}")
    if "code" not in query or "state" not in query:
        raise ValueError("no code and state in the pasted address")
    return query["code"][0], query["state"][0]


def ask_the_user(url: str) -> Tuple[str, str]:
    """The redirect handler: lattice calls it when the server asks for a token. What it
    raises fails that request as an "auth" ``MCPError``."""
    print("Open this URL in a browser and approve:")
    print(f"  {url}")
    print("Then paste the address your browser was sent to:", flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        raise ValueError("no redirect URL on stdin")
    return code_and_state(line)


def approve_by_itself(url: str) -> Tuple[str, str]:
    """``--demo``: what the user does in the browser (open the page, press Approve)."""
    import requests

    print(f"authorization URL: {url[:url.index('?')]}?...")
    page = requests.get(url, timeout=10).text
    consent = requests.post(url[:url.index("?")], allow_redirects=False, timeout=10,
                            data=consent_fields(page))
    print("approved on the consent page")
    return code_and_state(consent.headers["Location"])


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", help="the MCP server (default: start local ones)")
    parser.add_argument("--demo", action="store_true",
                        help="approve by itself instead of asking (offline runs)")
    args = parser.parse_args(argv)
    handler: Any = approve_by_itself if args.demo else ask_the_user
    with server_url(args.url) as url:
        oauth = OAuth(redirect_handler=handler, redirect_uri=REDIRECT_URI)
        try:
            with MCPServerHTTP(url, auth=oauth) as server:
                names = [tool["name"] for tool in server.list_tools()]
                print(f"tools: {', '.join(names)}")
                if "add" in names:
                    result = server.call_tool("add", {"a": 2, "b": 3})
                    print(f"add(2, 3) = {result.content[0]['text']}")
        except MCPError as exc:  # its message never holds a token, code or verifier
            raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
