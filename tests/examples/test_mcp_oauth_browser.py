"""examples/mcp_oauth_web.py in headless Chromium: the page sends the browser to the local
authorization server's consent page, the test presses its one "Approve" button, the
callback hands ``code`` and ``state`` to ``oauth.finish`` and the page lists the tools of
the MCP server protected by the ``mcp`` SDK.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (.ci/run installs them),
``selenium`` and the ``mcp`` SDK (the test extra).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import real_parts

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "examples" / "mcp_oauth_web.py"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 60  # generous: the waits end as soon as the page is ready

real_parts.require("mcp.server.mcpserver")
webdriver = real_parts.require("selenium.webdriver")
for _binary, _package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
    if not os.access(_binary, os.X_OK):
        real_parts.skip(f"{_binary} is missing", f"apt-get install {_package}")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def web_app() -> Iterator[str]:
    """The example serving on a free port, with its own local servers; yields its URL."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")
    process = subprocess.Popen([sys.executable, str(WEB), "--port", str(free_port())],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, encoding="utf-8")
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # "open http://127.0.0.1:PORT/ in a browser"
        assert line.startswith("open http://"), line + process.stderr.read()
        yield line.split()[1]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def test_the_browser_is_sent_to_consent_and_back_to_the_tools(web_app: str,
                                                              browser: Any) -> None:
    wait = WebDriverWait(browser, WAIT_S)
    browser.get(web_app)
    button = wait.until(lambda d: d.find_elements(By.ID, "approve"))[0]
    assert "/authorize" in browser.current_url and web_app not in browser.current_url
    assert "Authorize client-" in browser.find_element(By.TAG_NAME, "h1").text
    button.click()
    tools = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "li.tool"))
    assert browser.current_url == web_app  # /callback sent it home
    assert sorted(t.text.split(":")[0] for t in tools) == ["add", "whoami"]
    browser.get(web_app)  # a second visit: the token is kept, no consent again
    again = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "li.tool"))
    assert len(again) == 2 and browser.current_url == web_app


def test_a_forged_callback_is_refused_in_words(web_app: str, browser: Any) -> None:
    wait = WebDriverWait(browser, WAIT_S)
    browser.get(web_app)
    wait.until(lambda d: d.find_elements(By.ID, "approve"))
    browser.get(web_app + "callback?code=stolen&state=forged")
    error = wait.until(lambda d: d.find_elements(By.ID, "error"))[0]
    assert "state is not the one sent" in error.text
    assert "stolen" not in browser.page_source
