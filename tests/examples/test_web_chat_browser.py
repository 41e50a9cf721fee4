"""examples/web_chat in a real browser: headless Chromium driven by selenium talks to the
app started the way a user starts it (``python examples/web_chat/app.py 0``, offline).

Needs the Debian packages ``chromium`` and ``chromium-driver`` (.ci/run installs them) and
the ``selenium`` test extra; skips, saying which is missing, without them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "web_chat" / "app.py"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 60  # generous: the machine may be busy; the waits end as soon as the page is ready

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed "
                                "(pip install -e '.[test]')")
for _binary, _package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
    if not os.access(_binary, os.X_OK):
        pytest.skip(f"{_binary} is missing (apt-get install {_package})",
                    allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def app_url(app: Tuple[str, Any]) -> str:
    return app[0]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Tuple[str, Any]]:
    """The example app in its own process, offline, on a free port it reports:
    ``(url, process)``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONPATH=str(ROOT), WEB_CHAT_DB=str(tmp_path / "chat.db"))
    process = subprocess.Popen([sys.executable, str(APP), "0"], env=env, cwd=tmp_path,
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    drain = threading.Thread(target=lambda: process.stderr and process.stderr.read(),
                             daemon=True)
    try:
        assert process.stderr is not None
        first = process.stderr.readline()  # blocks until the server is listening
        found = re.search(r"http://127\.0\.0\.1:\d+/", first)
        assert found, f"the app did not start: {first}{process.stderr.read()}"
        # Keep reading its request log, so that a full pipe never blocks the server.
        drain.start()
        yield found.group(0), process
    finally:
        process.terminate()
        process.wait(30)
        if drain.is_alive():
            drain.join(30)
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def shown(driver: Any) -> List[str]:
    """The conversation as the page shows it: 'role: text' per message."""
    return [f"{el.get_attribute('class').split()[-1]}: {el.text}"
            for el in driver.find_elements(By.CSS_SELECTOR, "#log .msg")]


def test_chat_approve_and_reload(app_url: str, browser: Any) -> None:
    wait = WebDriverWait(browser, WAIT_S)
    browser.get(app_url)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    assert shown(browser) == []

    box = browser.find_element(By.ID, "message")
    box.send_keys("Please email ada@example.com")
    browser.find_element(By.ID, "send").click()

    # The streamed reply, then the approval prompt for the call.
    wait.until(lambda d: "assistant: Sure, I will email ada@example.com for you." in shown(d))
    approve = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert "send_email" in browser.find_element(By.CSS_SELECTOR, ".approval").text
    assert browser.execute_script("return window.textChunks") > 1  # arrived in pieces
    asked = shown(browser)

    # The decision may come in a later page load: the pending call is in the store.
    browser.refresh()
    approve = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert shown(browser) == asked
    approve[0].click()

    result = "Email to ada@example.com with subject 'Hello' queued as message #1."
    wait.until(lambda d: f"assistant: Done: {result}" in shown(d))
    assert not browser.find_elements(By.CSS_SELECTOR, ".approval")
    before = shown(browser)
    assert before == [
        "user: Please email ada@example.com",
        "assistant: Sure, I will email ada@example.com for you.",
        'call: send_email({"to": "ada@example.com", "subject": "Hello"})',
        f"result: {result}",
        f"assistant: Done: {result}",
    ]

    # A reload renders the same conversation from the store (the cookie names the user).
    browser.refresh()
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    assert shown(browser) == before


# -- when things go wrong, the page says so in words ----------------------------------------


def errors_shown(driver: Any) -> List[str]:
    return [el.text for el in driver.find_elements(By.CSS_SELECTOR, "#log .error")]


def test_a_server_that_cannot_be_reached_is_said_and_the_form_stays_usable(
        app: Tuple[str, Any], browser: Any) -> None:
    url, process = app
    wait = WebDriverWait(browser, WAIT_S)
    browser.get(url)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    process.terminate()  # the network goes away before the message is sent
    process.wait(30)
    box = browser.find_element(By.ID, "message")
    box.send_keys("hello?")
    browser.find_element(By.ID, "send").click()
    wait.until(lambda d: errors_shown(d))
    assert errors_shown(browser) == [
        "Could not reach the server, so nothing was sent. Check your connection and try again."]
    form = browser.find_element(By.ID, "form")
    assert form.get_attribute("data-busy") is None  # not frozen: the user can send again
    assert box.get_attribute("value") == "hello?"  # and the text is there to send again


def test_an_approval_already_given_in_another_tab_is_said_in_words(
        app_url: str, browser: Any) -> None:
    wait = WebDriverWait(browser, WAIT_S)
    browser.get(app_url)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    browser.find_element(By.ID, "message").send_keys("Please email ada@example.com")
    browser.find_element(By.ID, "send").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    first = browser.current_window_handle

    browser.switch_to.new_window("tab")  # the same user (cookie) in a second tab
    browser.get(app_url)
    approve = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    approve[0].click()
    wait.until(lambda d: any(line.startswith("assistant: Done:") for line in shown(d)))

    browser.switch_to.window(first)  # still showing the buttons: a stale page
    browser.find_element(By.CSS_SELECTOR, ".approval .approve").click()
    wait.until(lambda d: errors_shown(d))
    (error,) = errors_shown(browser)
    assert error.startswith("This call was already answered, maybe in another tab"), error
    assert "toolu_" not in error and "approvals" not in error and "<" not in error
    assert browser.find_element(By.ID, "form").get_attribute("data-busy") is None
