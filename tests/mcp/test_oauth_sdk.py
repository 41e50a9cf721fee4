"""``lattice.mcp.OAuth`` against an MCP server protected by the official ``mcp`` Python SDK's
own auth (``AuthSettings`` + a ``TokenVerifier``), with the local authorization server of
``examples/_oauth_servers.py``: RFC 9728 discovery from the SDK's 401, RFC 8414 metadata,
registration, the consent page, PKCE, the resource indicator, then tools listed and called."""

from __future__ import annotations

import re
import sys
from html import unescape
from pathlib import Path
from typing import Tuple
from urllib.parse import parse_qs, urlsplit

import pytest
import real_parts
import requests

real_parts.require("mcp.server.mcpserver")  # a test extra (Python 3.10+); CI has it

from lattice.mcp import MCPError, MCPServerHTTP, OAuth  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from _oauth_servers import local_servers  # noqa: E402

REDIRECT = "http://127.0.0.1:9/callback"  # never fetched: the handler reads the Location


def approve(url: str) -> Tuple[str, str]:
    """The user: opens the consent page and presses its button."""
    page = requests.get(url, timeout=10)
    assert page.status_code == 200 and 'id="approve"' in page.text
    fields = {unescape(k): unescape(v) for k, v in
              re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)">', page.text)}
    consent = requests.post(urlsplit(url)._replace(query="").geturl(), data=fields,
                            allow_redirects=False, timeout=10)
    assert consent.status_code == 302
    query = parse_qs(urlsplit(consent.headers["Location"]).query)
    return query["code"][0], query["state"][0]


def test_an_sdk_protected_server_is_reached_through_discovery_and_pkce():
    with local_servers() as (authorization, url):
        # without a token the SDK answers 401 with its resource metadata
        refused = requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                headers={"Accept": "application/json, text/event-stream"},
                                timeout=10)
        assert refused.status_code == 401
        assert "resource_metadata=" in refused.headers["WWW-Authenticate"]
        seen = []
        oauth = OAuth(redirect_handler=lambda u: seen.append(u) or approve(u),
                      redirect_uri=REDIRECT)
        with MCPServerHTTP(url, auth=oauth) as server:
            names = sorted(tool["name"] for tool in server.list_tools())
            assert names == ["add", "whoami"]
            assert server.call_tool("add", {"a": 2, "b": 3}).content[0]["text"] == "5"
            [client_id] = authorization.clients
            assert server.call_tool("whoami").content[0]["text"] == f"client {client_id}"
        [address] = seen  # one consent for the whole session
        asked = parse_qs(urlsplit(address).query)
        assert asked["resource"] == [url] and asked["code_challenge_method"] == ["S256"]
        assert authorization.approvals == 1
        [token] = authorization.tokens.values()
        assert token["aud"] == url  # the token is bound to this server


def test_a_token_for_another_resource_is_refused_by_the_sdk():
    with local_servers() as (authorization, url):
        token = authorization.issue("someone", "http://127.0.0.1:9/other", "")["access_token"]
        refused = requests.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                headers={"Accept": "application/json, text/event-stream",
                                         "Authorization": f"Bearer {token}"}, timeout=10)
        assert refused.status_code == 401


def test_without_a_redirect_handler_the_web_flow_finishes_later():
    with local_servers() as (authorization, url):
        oauth = OAuth(redirect_uri=REDIRECT)
        server = MCPServerHTTP(url, auth=oauth)
        try:
            with pytest.raises(MCPError) as info:
                server.start()  # initialize meets the 401: the user must authorize
            assert info.value.kind == "auth" and "pending_authorization_url" in str(info.value)
            assert oauth.pending_authorization_url
            oauth.finish(*approve(oauth.pending_authorization_url))
            server.start()
            assert server.call_tool("add", {"a": 1, "b": 1}).content[0]["text"] == "2"
        finally:
            server.close()
