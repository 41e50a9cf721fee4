"""examples/web_chat in a real browser: headless Chromium driven by selenium talks to the app
started the way a user starts it (``python examples/web_chat/app.py PORT``, offline).

The page follows each run through ``lattice.follow()`` over Server-Sent Events, so it is
tested where that matters: a conversation with an approval, a reload mid-run, two tabs, a
restarted server, a Celery worker killed mid-run (real Redis, real workers), a server that
cannot be reached, a stale approval. No response of the app may be a 5xx. When a test fails
it saves a screenshot of every tab in ``LATTICE_SCREENSHOTS`` (default: the test's tmp dir).

Needs the Debian packages ``chromium`` and ``chromium-driver`` (.ci/run installs them) and
the ``selenium`` test extra; skips, saying which is missing and how to get it, without them
(fails instead in CI: tests/real_parts.py)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import real_parts

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "web_chat" / "app.py"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 60  # generous: the machine may be busy; the waits end as soon as the page is ready

webdriver = real_parts.require("selenium.webdriver")
for _binary, _package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
    if not os.access(_binary, os.X_OK):
        real_parts.skip(f"{_binary} is missing", f"apt-get install {_package}")

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow
RESULT = "Email to ada@example.com with subject 'Hello' queued as message #1."


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class App:
    """The example app in its own process, offline: ``start()`` / ``stop()`` on one port,
    its request log kept (to check that no response was a 5xx)."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("ANTHROPIC_", "CELERY_", "LATTICE_BROKER"))}
        self.env.update(PYTHONPATH=str(ROOT), WEB_CHAT_DB=str(tmp_path / "chat.db"), **env)
        self.cwd = tmp_path
        self.log: List[str] = []
        self.process: Any = None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(APP), str(self.port)],
                                        env=self.env, cwd=self.cwd, stderr=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, text=True,
                                        start_new_session=True)
        first = self.process.stderr.readline()  # blocks until the server is listening
        assert re.search(r"http://127\.0\.0\.1:\d+/", first), \
            f"the app did not start: {first}{self.process.stderr.read()}"
        self.log.append(first)
        # Keep reading its request log, so that a full pipe never blocks the server.
        threading.Thread(target=self.log.extend, args=(self.process.stderr,),
                         daemon=True).start()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(30)

    def server_errors(self) -> List[str]:
        return [line for line in self.log if re.search(r'" 5\d\d ', line)]


def served(server: App) -> Iterator[App]:
    """``server`` started for the test, stopped after it; it logged no server error."""
    server.start()
    try:
        yield server
    finally:
        server.stop()
    assert server.server_errors() == []


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    yield from served(App(tmp_path))


@pytest.fixture
def browser(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    failed_before = request.session.testsfailed
    try:
        yield driver
    finally:
        if request.session.testsfailed > failed_before:  # this test failed
            save_screenshots(driver, tmp_path, request.node.name)
        driver.quit()


def save_screenshots(driver: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("LATTICE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    for i, handle in enumerate(driver.window_handles):
        driver.switch_to.window(handle)
        path = folder / f"{name}-tab{i}.png"
        driver.save_screenshot(str(path))
        print(f"screenshot of the failed state: {path}")


def shown(driver: Any) -> List[str]:
    """The conversation as the page shows it: 'role: text' per message."""
    return [f"{el.get_attribute('class').split()[-1]}: {el.text}"
            for el in driver.find_elements(By.CSS_SELECTOR, "#log .msg")]


def said(driver: Any) -> List[str]:
    """``shown`` without the approval boxes and error lines: the conversation itself."""
    return [line for line in shown(driver) if not line.startswith(("approval:", "error:"))]


def errors_shown(driver: Any) -> List[str]:
    return [el.text for el in driver.find_elements(By.CSS_SELECTOR, "#log .error")]


def open_page(driver: Any, url: str) -> WebDriverWait:
    # the page re-renders its log as news comes: an element found a moment ago may be gone
    # when its text is read, which is a reason to look again, not a failure
    wait = WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))
    driver.get(url)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    return wait


def send(driver: Any, text: str) -> None:
    driver.find_element(By.ID, "message").send_keys(text)
    driver.find_element(By.ID, "send").click()


def answered(driver: Any) -> bool:
    return f"assistant: Done: {RESULT}" in shown(driver)


CONVERSATION = [
    "user: Please email ada@example.com",
    "assistant: Sure, I will email ada@example.com for you.",
    "call: send_email — to: ada@example.com, subject: Hello",
    f"result: {RESULT}",
    f"assistant: Done: {RESULT}",
]


def test_chat_approve_and_reload(app: App, browser: Any) -> None:
    wait = open_page(browser, app.url)
    assert shown(browser) == []
    send(browser, "Please email ada@example.com")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert "send_email" in browser.find_element(By.CSS_SELECTOR, ".approval").text
    asked = shown(browser)
    assert asked[:2] == CONVERSATION[:2]

    # The decision may come in a later page load: the pending call is in the store.
    browser.refresh()
    approve = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert shown(browser) == asked
    approve[0].click()
    wait.until(answered)
    assert not browser.find_elements(By.CSS_SELECTOR, ".approval")
    assert shown(browser) == CONVERSATION

    # A reload renders the same conversation from the store (the cookie names the user).
    open_page(browser, app.url)
    assert shown(browser) == CONVERSATION
    assert errors_shown(browser) == []


@pytest.fixture
def slow_app(tmp_path: Path) -> Iterator[App]:
    # slow model work: a run takes a while
    yield from served(App(tmp_path, WEB_CHAT_MODEL_DELAY_S="1.5"))


def test_a_page_reloaded_mid_run_shows_the_answer_with_no_click(slow_app: App,
                                                                browser: Any) -> None:
    wait = open_page(browser, slow_app.url)
    send(browser, "Please email ada@example.com")
    wait.until(lambda d: "user: Please email ada@example.com" in shown(d))
    browser.refresh()  # mid-run: the model is still thinking
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert said(browser) == CONVERSATION[:3]
    assert errors_shown(browser) == []


def test_two_tabs_see_one_conversation_and_a_stale_approval_is_said_in_words(
        slow_app: App, browser: Any) -> None:
    wait = open_page(browser, slow_app.url)
    send(browser, "Please email ada@example.com")
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")  # the same user (cookie) in a second tab, mid-run
    wait = open_page(browser, slow_app.url)
    approve = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert len(approve) == 1  # the approval is shown once in this tab
    browser.switch_to.window(first)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert said(browser) == CONVERSATION[:3]

    browser.switch_to.window(browser.window_handles[1])
    browser.find_element(By.CSS_SELECTOR, ".approval .approve").click()
    wait.until(answered)

    browser.switch_to.window(first)  # still showing the buttons: a stale page
    browser.find_element(By.CSS_SELECTOR, ".approval .approve").click()
    wait.until(lambda d: errors_shown(d))
    (error,) = errors_shown(browser)
    assert error.startswith("This call was already answered, maybe in another tab"), error
    assert "toolu_" not in error and "approvals" not in error and "<" not in error
    assert browser.find_element(By.ID, "form").get_attribute("data-busy") is None


def test_a_restarted_server_resumes_the_run_and_the_page_gets_the_answer(
        slow_app: App, browser: Any) -> None:
    wait = open_page(browser, slow_app.url)
    send(browser, "Please email ada@example.com")
    wait.until(lambda d: "user: Please email ada@example.com" in shown(d))
    slow_app.stop(signal.SIGKILL)  # the server dies mid-run, its job thread with it
    slow_app.start()  # and comes back: it resumes the run the store says is unfinished
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
    assert said(browser) == CONVERSATION[:3]
    assert any("runs resumed" in line for line in slow_app.log), slow_app.log[:3]


def test_a_server_that_cannot_be_reached_is_said_and_the_form_stays_usable(
        app: App, browser: Any) -> None:
    wait = open_page(browser, app.url)
    app.stop()  # the network goes away before the message is sent
    box = browser.find_element(By.ID, "message")
    send(browser, "hello?")
    wait.until(lambda d: errors_shown(d))
    assert errors_shown(browser) == [
        "Could not reach the server, so nothing was sent. Check your connection and try again."]
    assert browser.find_element(By.ID, "form").get_attribute("data-busy") is None
    assert box.get_attribute("value") == "hello?"  # the text is there to send again


# -- Celery workers, one killed mid-run --------------------------------------------------------

@contextmanager
def celery_workers(env: Dict[str, str], logs: Path, count: int = 2) -> Iterator[List[Any]]:
    workers: List[Any] = []

    def start(n: int) -> Any:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "--workdir", str(APP.parent), "-A", "jobs",
             "worker", "-P", "solo", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-l", "WARNING", "-n", f"chat{n}@localhost"],
            env=env, stdout=open(logs / f"celery-{n}.log", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)

    workers.extend(start(n) for n in range(count))
    try:
        yield workers
    finally:
        for process in workers:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(10)


def test_a_celery_worker_killed_mid_run_and_the_page_still_gets_the_answer(
        tmp_path: Path, browser: Any, request: pytest.FixtureRequest) -> None:
    real_parts.require("celery")
    redis_server = request.getfixturevalue("redis_server")
    server = App(tmp_path, CELERY_BROKER_URL=redis_server.url, WEB_CHAT_MODEL_DELAY_S="1.5",
                 WEB_CHAT_VISIBILITY_S="4")
    server.start()
    try:
        with celery_workers(server.env, tmp_path) as workers:
            wait = open_page(browser, server.url)
            send(browser, "Please email ada@example.com")
            wait.until(lambda d: "user: Please email ada@example.com" in shown(d))
            # The run is going in one of the workers: kill whichever holds it (both: a
            # crashed pod), then start a fresh one that will take the redelivered job.
            for process in workers:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
            workers[:] = []
            with celery_workers(server.env, tmp_path, count=1) as fresh:
                workers.extend(fresh)
                wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval .approve"))
                assert said(browser) == CONVERSATION[:3]
                browser.find_element(By.CSS_SELECTOR, ".approval .approve").click()
                wait.until(answered)
                assert shown(browser) == CONVERSATION
    finally:
        server.stop()
    assert server.server_errors() == []


# -- long runs, a busy second tab, no free worker, a whole worker killed --------------------

def thinking_text(driver: Any) -> str:
    found = driver.find_elements(By.ID, "thinking")
    return found[0].text if found else ""


def test_a_long_run_shows_thinking_and_never_a_lost_connection(tmp_path: Path,
                                                               browser: Any) -> None:
    # The events response ends every 0.5 s without news (20 s in use): the run (two slow
    # model requests) outlasts it several times; the page must follow on without a word.
    for server in served(App(tmp_path, WEB_CHAT_MODEL_DELAY_S="1.5",
                             WEB_CHAT_FOLLOW_WAIT_S="0.5")):
        wait = open_page(browser, server.url)
        send(browser, "Please email ada@example.com")
        wait.until(lambda d: thinking_text(d) == "thinking…")
        seen_errors: List[str] = []

        def approval_or_error(d: Any) -> bool:
            seen_errors.extend(errors_shown(d))
            return bool(d.find_elements(By.CSS_SELECTOR, ".approval .approve"))

        WebDriverWait(browser, WAIT_S, poll_frequency=0.05).until(approval_or_error)
        assert seen_errors == []
        assert thinking_text(browser) == ""  # waiting for the person now, not the model
        assert said(browser) == CONVERSATION[:3]
        browser.find_element(By.CSS_SELECTOR, ".approval .approve").click()
        wait.until(lambda d: thinking_text(d) == "thinking…" or answered(d))
        wait.until(answered)
        assert thinking_text(browser) == "" and errors_shown(browser) == []


@pytest.fixture
def slower_app(tmp_path: Path) -> Iterator[App]:
    # a run that is surely still going while a second tab is opened on a busy machine
    yield from served(App(tmp_path, WEB_CHAT_MODEL_DELAY_S="20"))


def test_a_busy_refusal_in_a_second_tab_keeps_the_text(slower_app: App, browser: Any) -> None:
    slow_app = slower_app
    wait = open_page(browser, slow_app.url)
    browser.switch_to.new_window("tab")  # the same user in a second tab, idle
    open_page(browser, slow_app.url)
    # this tab has not looked for news yet (its look every 2 s is held back)
    browser.execute_script("document.body.dataset.loaded = 'held';")
    second = browser.current_window_handle
    browser.switch_to.window(browser.window_handles[0])
    send(browser, "Please email ada@example.com")
    wait.until(lambda d: "user: Please email ada@example.com" in shown(d))
    browser.switch_to.window(second)
    send(browser, "and bob@example.com too")
    wait.until(lambda d: errors_shown(d))
    assert errors_shown(browser)[0].startswith("I am still answering your other request")
    assert browser.find_element(By.ID, "message").get_attribute("value") == \
        "and bob@example.com too"  # the text it asks to send again is still there
    assert not [line for line in shown(browser) if line.startswith("pending:")]


def test_a_whole_celery_worker_killed_does_not_freeze_the_page(
        tmp_path: Path, browser: Any, request: pytest.FixtureRequest) -> None:
    real_parts.require("celery")
    redis_server = request.getfixturevalue("redis_server")
    # The visibility timeout is an hour: the killed worker's job does not come back.
    server = App(tmp_path, CELERY_BROKER_URL=redis_server.url, WEB_CHAT_MODEL_DELAY_S="1.5",
                 WEB_CHAT_VISIBILITY_S="3600", WEB_CHAT_FOLLOW_WAIT_S="1")
    server.start()
    try:
        with celery_workers(server.env, tmp_path, count=1) as workers:
            wait = open_page(browser, server.url)
            send(browser, "Please email ada@example.com")
            wait.until(lambda d: "user: Please email ada@example.com" in shown(d))
            for process in workers:  # the whole worker dies mid-run
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
            workers[:] = []
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".note"))
            assert "interrupted" in browser.find_element(By.CSS_SELECTOR, ".note").text
            assert browser.find_element(By.ID, "form").get_attribute("data-busy") is None
            # Send works; with no worker left, the message is shown as queued, not lost.
            send(browser, "hello again")
            wait.until(lambda d: thinking_text(d) == "waiting for a free worker…")
            assert "pending: hello again" in shown(browser)
            browser.refresh()  # a reload shows it too
            wait = open_page(browser, server.url)
            wait.until(lambda d: "pending: hello again" in shown(d))
            assert thinking_text(browser) == "waiting for a free worker…"
            with celery_workers(server.env, tmp_path, count=1) as fresh:
                workers.extend(fresh)
                wait.until(lambda d: "assistant: You said: hello again. Mention an email "
                           "address and I will write." in shown(d))
                wait.until(lambda d: d.find_element(By.ID, "form").get_attribute(
                    "data-busy") is None)
                assert not [line for line in shown(browser) if line.startswith("pending:")]
                assert "user: hello again" in shown(browser)
    finally:
        server.stop()
    assert server.server_errors() == []
