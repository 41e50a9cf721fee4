"""examples/mcp_oauth_cli.py as a user runs it: it prints the authorization URL, the user
approves in a browser (here: the consent page fetched and its button pressed over HTTP) and
pastes the address the browser landed on into stdin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path
from typing import Dict
from urllib.parse import urlsplit

import real_parts
import requests

real_parts.require("mcp.server.mcpserver")

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "examples" / "mcp_oauth_cli.py"
TIMEOUT_S = 60


def env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")


def start() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CLI)], env=env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8")


def read_url(process: subprocess.Popen[str]) -> str:
    """The authorization URL the example printed (the line after "Open this URL")."""
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Then paste"):
            break
    printed = "".join(lines)
    found = re.search(r"^  (http://\S+/authorize\?\S+)$", printed, re.MULTILINE)
    assert found, printed
    return found.group(1)


def press_approve(url: str) -> str:
    """The browser: the consent page, its button; returns where the redirect points."""
    page = requests.get(url, timeout=10).text
    fields = {unescape(k): unescape(v) for k, v in re.findall(
        r'<input type="hidden" name="([^"]*)" value="([^"]*)">', page)}
    consent = requests.post(urlsplit(url)._replace(query="").geturl(), data=fields,
                            allow_redirects=False, timeout=10)
    assert consent.status_code == 302
    location: str = consent.headers["Location"]
    return location


def test_the_cli_prints_the_url_and_reads_the_redirect_from_stdin():
    process = start()
    try:
        url = read_url(process)
        redirect = press_approve(url)
        assert redirect.startswith("http://127.0.0.1:8976/callback?code=")
        out, err = process.communicate(redirect + "\n", timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "tools: add, whoami" in out and "add(2, 3) = 5" in out
    assert "Traceback" not in err


def test_a_pasted_address_with_another_state_is_refused():
    process = start()
    try:
        redirect = press_approve(read_url(process))
        forged = re.sub(r"state=[^&]+", "state=forged", redirect)
        out, err = process.communicate(forged + "\n", timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode != 0
    assert "state is not the one sent" in out + err
    assert "/authorize?" not in out  # the user is asked once: a refused authorization is
    # not taken for a server that speaks only the older protocol (asked again on initialize)
    code = re.search(r"code=([^&]+)", redirect).group(1)  # type: ignore[union-attr]
    assert code not in err  # the error names no code


def test_an_empty_paste_says_so():
    process = start()
    try:
        read_url(process)
        out, err = process.communicate("\n", timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode != 0 and "no redirect URL on stdin" in err
