"""``lattice.mcp.OAuth`` against a local protected MCP server and authorization server
(``oauth_fixture.py``): the authorization code flow with registration and PKCE, refresh,
secrets kept out of errors, logs and reprs, and ``FileTokenStore`` (mode 0600, two
processes refreshing one token at once). The conformance suite (test_conformance.py)
covers discovery variants, scopes, step-up, client credentials and RFC 9207."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lattice.mcp import FileTokenStore, MCPError, MCPServerHTTP, OAuth

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oauth_fixture import AuthServer, follow  # noqa: E402

FIXTURE = str(Path(__file__).with_name("oauth_fixture.py"))


def secrets_of(server: AuthServer) -> list:
    found = [*server.tokens, *server.refresh, *server.clients.values()]
    for form in server.log:
        found += [form.get(k) for k in ("code", "code_verifier", "refresh_token") if k in form]
    return [s for s in found if s]


def test_a_401_becomes_a_token_through_registration_and_pkce(caplog):
    with AuthServer() as auth_server, caplog.at_level(logging.DEBUG):
        oauth = OAuth(redirect_handler=follow)
        with MCPServerHTTP(auth_server.url, auth=oauth) as server:
            result = server.call_tool("whoami")
            assert result.content == [{"type": "text", "text": "you are authorized"}]
            [exchange] = auth_server.log  # one code, one verifier, the resource named
            assert exchange["grant_type"] == "authorization_code"
            assert exchange["resource"] == auth_server.url
            echoed = server.call_tool("echo_auth").content[0]["text"]
            assert echoed.startswith("you sent Bearer ")  # the token itself never shows
            shown = [repr(oauth), repr(server), repr(oauth.token_store), caplog.text, echoed]
        for secret in secrets_of(auth_server):
            assert all(secret not in text for text in shown), "a secret was shown"


def test_an_expired_token_is_refreshed_and_a_refused_one_leaves_no_secret_in_the_error():
    with AuthServer(expires_in=1, refreshed_expires_in=1) as auth_server:  # always refresh
        oauth = OAuth(redirect_handler=follow)
        with MCPServerHTTP(auth_server.url, auth=oauth) as server:
            server.call_tool("whoami")
            server.call_tool("whoami")
            assert auth_server.refreshes >= 1
            # the server forgets every token, and the authorization server every client:
            auth_server.tokens.clear()
            auth_server.clients.clear()
            auth_server.refresh.clear()
            with pytest.raises(MCPError) as info:
                server.call_tool("whoami")
            assert info.value.kind == "auth"
            for secret in secrets_of(auth_server):
                assert secret not in str(info.value)


def test_file_token_store_is_private_and_two_processes_refresh_once(tmp_path):
    path = tmp_path / "tokens.json"
    with AuthServer(expires_in=1) as auth_server:  # the first token is stale at once
        oauth = OAuth(redirect_handler=follow, token_store=FileTokenStore(path))
        assert oauth.authorization(auth_server.url) is None  # nothing yet
        assert oauth.challenge(auth_server.url, 401, 'Bearer resource_metadata="'
                               + auth_server.base + '/.well-known/oauth-protected-resource/mcp"')
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        stored = json.loads(path.read_text())
        assert list(stored) == [auth_server.url]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
        both = [subprocess.Popen([sys.executable, FIXTURE, auth_server.url, str(path)],
                                 stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        answers = [p.communicate(timeout=60)[0].strip() for p in both]
        assert all(p.returncode == 0 for p in both)
        assert answers[0] == answers[1] and answers[0].startswith("Bearer at-")
        assert auth_server.refreshes == 1  # the second found the first's new token
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="grant must be one of"):
        OAuth(grant="password")
    with pytest.raises(ValueError, match="client_secret must be"):
        OAuth(client_secret="")
    with pytest.raises(ValueError, match="auth must be a lattice.mcp.OAuth"):
        MCPServerHTTP("http://127.0.0.1:9/mcp", auth="token")
    with pytest.raises(ValueError, match="token_store must have"):
        OAuth(token_store=object())
    with pytest.raises(ValueError, match="scopes must be a list of str or None, got 5"):
        OAuth(scopes=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="client_name must be a non-empty str"):
        OAuth(client_name="")
    with pytest.raises(ValueError, match="redirect_uri must be an absolute URL, got '/cb'"):
        OAuth(redirect_uri="/cb")


def test_a_redirect_handler_that_raises_system_exit_fails_the_start_at_once():
    # the handler runs on the request's own thread: its SystemExit must reach the caller
    # as an authorization failure, not end that thread and leave the caller waiting
    def quits(url):
        raise SystemExit("the user closed the prompt")

    with AuthServer() as auth_server:
        server = MCPServerHTTP(auth_server.url, auth=OAuth(redirect_handler=quits),
                               timeout_ms=60_000)
        with pytest.raises(MCPError) as caught:
            server.start()
        server.close()
    assert caught.value.kind == "auth" and "SystemExit" in str(caught.value)


def test_session_secrets_are_asked_of_the_auth_each_time():
    # One source for what is redacted from errors and tool results: a token, refresh
    # token or assertion the OAuth object meets later is redacted too, longest first.
    from lattice.mcp._rpc import RPCSession

    seen = ["at-short"]
    session = RPCSession("s", lambda message: None, secrets=["header-value"],
                         more_secrets=lambda: list(seen))
    assert session.secrets == ["header-value", "at-short"]
    seen.append("rt-a-longer-refresh-token")
    assert session.secrets == ["rt-a-longer-refresh-token", "header-value", "at-short"]
