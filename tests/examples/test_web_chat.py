"""examples/web_chat/app.py over real HTTP (wsgiref in a thread, urllib as the browser):
a streamed reply that asks for approval, Approve / Deny in a later request, the history
page, bad requests; then under gunicorn with concurrent requests of one user.
tests/examples/test_web_chat_browser.py drives the same page in Chromium."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import real_parts

from lattice import SqliteHistoryStore
from lattice.testing import assert_well_formed

APP_PATH = Path(__file__).resolve().parents[2] / "examples" / "web_chat" / "app.py"


def load_app_module() -> Any:
    spec = importlib.util.spec_from_file_location("web_chat_app", APP_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(db_path: Path, runner: Any = None) -> Iterator[Tuple[str, Any]]:
    """The app on an ephemeral port of 127.0.0.1: ``(base url, ChatApp)``."""
    module = load_app_module()
    app = module.ChatApp(str(db_path), runner)
    server = make_server("127.0.0.1", 0, app, server_class=module.ThreadingWSGIServer,
                         handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", app
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        app.runner.close()


def call(base: str, path: str, user: Optional[str], body: Any = None
         ) -> Tuple[int, Dict[str, str], bytes]:
    data = None if body is None else (body if isinstance(body, bytes) else
                                      json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data)
    if user is not None:
        request.add_header("Cookie", f"uid={user}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def events(base: str, path: str, user: str, body: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """POST a message or approvals (the app answers 202 with the run it started), then
    follow that run's Server-Sent Events to its end."""
    status, headers, raw = call(base, path, user, body)
    assert status == 202, raw
    run = json.loads(raw)
    return follow(base, user, run["run_id"], run["after"])


def follow(base: str, user: str, run_id: str, after: int) -> List[Tuple[str, Dict[str, Any]]]:
    """``GET /events`` of a run, parsed: ``[(event, data)]``, each ``shown`` item as its own
    ``(role, {"text"})`` entry, then ``approval`` and ``done``."""
    status, headers, raw = call(base, f"/events?run={run_id}&after={after}", user)
    assert status == 200 and headers["Content-Type"] == "text/event-stream", raw
    parsed: List[Tuple[str, Dict[str, Any]]] = []
    for chunk in raw.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in chunk.split("\n") if ": " in line)
        if "event" not in fields:
            continue
        data = json.loads(fields["data"])
        if fields["event"] == "shown":
            parsed.extend((item["role"], {"text": item["text"]}) for item in data["items"])
        else:
            parsed.append((fields["event"], data))
    return parsed


def texts(parsed: List[Tuple[str, Dict[str, Any]]], kind: str) -> List[str]:
    return [data["text"] for event, data in parsed if event == kind]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Tuple[str, Any]]:
    with serve(tmp_path / "chat.db") as pair:
        yield pair


def test_a_reply_asks_for_approval_and_approving_in_a_later_request_finishes_it(served):
    base, app = served
    first = events(base, "/chat", "alice", {"message": "Please email ada@example.com"})
    assert texts(first, "user") == ["Please email ada@example.com"]
    assert texts(first, "assistant") == ["Sure, I will email ada@example.com for you."]
    assert texts(first, "call") == ["send_email — to: ada@example.com, subject: Hello"]
    (calls,) = [data["calls"] for event, data in first if event == "approval"]
    assert first[-1] == ("done", {"subtype": "awaiting_approval", "error": None})

    status, _, raw = call(base, "/history", "alice")
    history = json.loads(raw)
    assert status == 200 and history["pending"] == calls and history["running"] is None
    assert [m["role"] for m in history["messages"]] == ["user", "assistant", "call"]

    second = events(base, "/approve", "alice", {"approvals": {calls[0]["id"]: True}})
    result = "Email to ada@example.com with subject 'Hello' queued as message #1."
    assert texts(second, "result") == [result]
    assert texts(second, "assistant") == [f"Done: {result}"]
    assert second[-1] == ("done", {"subtype": "success", "error": None})

    history = json.loads(call(base, "/history", "alice")[2])
    assert history["pending"] == []
    assert [m["role"] for m in history["messages"]] == [
        "user", "assistant", "call", "result", "assistant"]
    assert history["messages"][-1]["text"] == f"Done: {result}"
    assert_well_formed(SqliteHistoryStore(app.db_path, session_id="alice").load())


def test_deny_users_apart_and_the_cookie(served):
    base, _ = served
    first = events(base, "/chat", "bob", {"message": "write to bo@example.org"})
    (calls,) = [data["calls"] for event, data in first if event == "approval"]
    denied = events(base, "/approve", "bob", {"approvals": {calls[0]["id"]: False}})
    assert "did not approve" in texts(denied, "result")[0]
    assert texts(denied, "assistant")[0].startswith("I could not send it:")
    # Another user has a conversation of their own; a visitor without a cookie gets one.
    assert json.loads(call(base, "/history", "carol")[2]) == {
        "messages": [], "count": 0, "pending": [], "running": None}
    status, headers, page = call(base, "/", None)
    assert status == 200 and b'class="approve"' not in page and b"askApproval" in page
    assert headers["Set-Cookie"].startswith("uid=")
    plain = events(base, "/chat", "bob", {"message": "thanks"})
    assert texts(plain, "assistant")[0].startswith("You said: thanks")


def test_bad_requests_are_400_naming_the_problem(served):
    base, _ = served
    for path, body, says in [
        ("/chat", {"message": ""}, '{"message"'),
        ("/chat", b"not json", "not JSON"),
        ("/chat", [1], "JSON object"),
        ("/approve", {"approvals": {"x": "yes"}}, '{"approvals"'),
        ("/approve", {"approvals": {}}, '{"approvals"'),
    ]:
        status, _, raw = call(base, path, "dave", body)
        assert status == 400 and says in raw.decode(), (path, body, raw)
    for query in ("", "?run=zz", "?run=0123456789abcdef&after=x"):
        status, _, raw = call(base, "/events" + query, "dave")
        assert status == 400, (query, raw)
    assert call(base, "/nowhere", "dave")[0] == 404
    # Approving calls that are not pending: a stale page (another tab decided), told so.
    status, _, raw = call(base, "/approve", "dave", {"approvals": {"x": True}})
    assert status == 409 and "already answered" in raw.decode(), raw
    events(base, "/chat", "dave", {"message": "email x@example.com"})
    status, _, raw = call(base, "/approve", "dave", {"approvals": {"wrong-id": True}})
    assert status == 409 and "Reload the page" in raw.decode(), raw
    # The refused approval changed nothing: the call is still pending.
    assert len(json.loads(call(base, "/history", "dave")[2])["pending"]) == 1


def test_a_second_message_while_a_run_goes_is_a_readable_409_and_a_reload_follows_it(
        served, monkeypatch):
    base, _ = served
    monkeypatch.setenv("WEB_CHAT_MODEL_DELAY_S", "1.0")  # slow model work: the run is going
    status, _, raw = call(base, "/chat", "ivy", {"message": "hello"})
    assert status == 202
    run = json.loads(raw)
    status, headers, raw = call(base, "/chat", "ivy", {"message": "again"})
    assert status == 409 and headers["Content-Type"].startswith("text/plain")
    assert "still answering your other request" in raw.decode()
    # A reload (or a second tab) learns of the run and follows it from what it has.
    history = json.loads(call(base, "/history", "ivy")[2])
    assert history["running"]["run_id"] == run["run_id"]
    rest = follow(base, "ivy", run["run_id"], history["count"])
    assert rest[-1] == ("done", {"subtype": "success", "error": None})
    shown = history["messages"] + [{"role": e, "text": d["text"]} for e, d in rest
                                   if e in ("user", "assistant")]
    assert [m["role"] for m in shown] == ["user", "assistant"]
    # Following it again after its end replays it whole: the page that reconnects late
    # still gets the answer.
    again = follow(base, "ivy", run["run_id"], run["after"])
    assert texts(again, "user") == ["hello"] and again[-1][0] == "done"


# -- runs that take long, wait for a worker, or lost theirs -------------------------------------
# An events response ends after WEB_CHAT_FOLLOW_WAIT_S without news (20 s; 0.5 s here), and
# says why in a last "quiet" event, so the page neither shows a lost connection nor follows
# a run nobody works on for ever.

def follow_to_end(base: str, user: str, run_id: str, after: int
                  ) -> List[Tuple[str, Dict[str, Any]]]:
    """Follow a run as the page does: again after each ``quiet`` (running) event."""
    everything: List[Tuple[str, Dict[str, Any]]] = []
    for _ in range(100):
        part = follow(base, user, run_id, after)
        everything.extend(part)
        assert part and part[-1][0] in ("done", "quiet"), part  # never ends without a word
        if part[-1] != ("quiet", {"state": "running"}):
            return everything
        after += sum(1 for event, _ in part if event not in ("quiet", "approval", "done"))
    raise AssertionError("the run never ended")


def test_a_run_longer_than_the_follow_wait_says_it_is_still_going(tmp_path, monkeypatch):
    monkeypatch.setenv("WEB_CHAT_FOLLOW_WAIT_S", "0.5")
    monkeypatch.setenv("WEB_CHAT_MODEL_DELAY_S", "1.5")
    with serve(tmp_path / "chat.db") as (base, _):
        status, _, raw = call(base, "/chat", "lee", {"message": "hello"})
        run = json.loads(raw)
        parsed = follow_to_end(base, "lee", run["run_id"], run["after"])
    assert ("quiet", {"state": "running"}) in parsed
    assert parsed[-1] == ("done", {"subtype": "success", "error": None})
    assert texts(parsed, "user") == ["hello"] and len(texts(parsed, "assistant")) == 1


class NoWorkers:
    """A job queue no worker takes jobs from (every Celery worker is busy or gone)."""

    def __init__(self) -> None:
        self.submitted: List[str] = []

    def submit(self, user: str, run_id: str, **what: Any) -> None:
        self.submitted.append(run_id)

    def close(self) -> None:
        pass


def test_a_message_no_worker_took_yet_is_shown_as_queued(tmp_path, monkeypatch):
    monkeypatch.setenv("WEB_CHAT_FOLLOW_WAIT_S", "0.5")
    queue = NoWorkers()
    with serve(tmp_path / "chat.db", queue) as (base, _):
        status, _, raw = call(base, "/chat", "max", {"message": "anyone there?"})
        assert status == 202
        run = json.loads(raw)
        assert queue.submitted == [run["run_id"]]
        history = json.loads(call(base, "/history", "max")[2])
        assert history["running"] == {"run_id": run["run_id"], "after": 0, "state": "queued",
                                      "message": "anyone there?"}
        assert follow(base, "max", run["run_id"], 0) == [("quiet", {"state": "queued"})]
        status, _, raw = call(base, "/chat", "max", {"message": "hello?"})
        assert status == 409 and "still answering" in raw.decode()


KILLED_JOB = """
import sys
sys.path.insert(0, sys.argv[1])
import jobs
jobs.run_chat("kim", sys.argv[3], "Please email ada@example.com", db_path=sys.argv[2])
"""


def test_a_run_whose_worker_was_killed_does_not_freeze_the_conversation(tmp_path,
                                                                       monkeypatch):
    import secrets
    import signal
    import time

    db = tmp_path / "chat.db"
    run_id = secrets.token_hex(12)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    job = subprocess.Popen(
        [sys.executable, "-c", KILLED_JOB, str(APP_PATH.parent), str(db), run_id],
        env=dict(env, WEB_CHAT_MODEL_DELAY_S="120", PYTHONPATH=str(ROOT)))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                db.exists() and SqliteHistoryStore(str(db), session_id="kim").load()):
            time.sleep(0.05)  # until the job has stored the prompt and asks the model
    finally:
        os.kill(job.pid, signal.SIGKILL)  # the whole worker dies mid-run
        job.wait(10)
    store = SqliteHistoryStore(str(db), session_id="kim")
    assert store.load_run(run_id)["state"] == "running"
    monkeypatch.setenv("WEB_CHAT_FOLLOW_WAIT_S", "0.5")
    with serve(db) as (base, _):
        history = json.loads(call(base, "/history", "kim")[2])  # a reload
        assert history["running"] is None and history["count"] == 1
        # a page that was following the run is told it was interrupted
        assert follow(base, "kim", run_id, 1) == [("quiet", {"state": "interrupted"})]
        status, _, raw = call(base, "/chat", "kim", {"message": "hello again"})
        assert status == 202, raw  # send works: the new run supersedes the cut-off one
        run = json.loads(raw)
        parsed = follow_to_end(base, "kim", run["run_id"], run["after"])
    assert parsed[-1] == ("done", {"subtype": "success", "error": None}), parsed
    assert store.load_run(run_id)["state"] == "ended"
    assert_well_formed(store.load())


# -- under gunicorn ---------------------------------------------------------------------------
# The app under its own documented gunicorn command, with one user's requests arriving at
# once (two tabs, a double click): each waits for the conversation's session lock and is
# answered, or is told readably that the other request is still being answered; never a
# 5xx. A stale approval (decided in another tab) is a readable 409 too.

ROOT = APP_PATH.parents[2]
needs_gunicorn = pytest.mark.skipif(importlib.util.find_spec("gunicorn") is None,
                                    reason=real_parts.reason("gunicorn is not installed",
                                                             real_parts.PIP_TEST))


def documented_command() -> List[str]:
    """The gunicorn command the app's docstring gives, as a list."""
    doc = APP_PATH.read_text(encoding="utf-8")
    line = next(line for line in doc.splitlines() if line.strip().startswith("gunicorn "))
    return shlex.split(line.split("#")[0])


@contextmanager
def gunicorn(tmp_path: Path, **env_extra: str) -> Iterator[str]:
    """The app under the documented command (bound to a free port), cwd = the repo root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONPATH=str(ROOT), WEB_CHAT_DB=str(tmp_path / "chat.db"), **env_extra)
    command = [sys.executable, "-m", *documented_command(), "-b", "127.0.0.1:0"]
    process = subprocess.Popen(command, env=env, cwd=ROOT, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log: List[str] = []
    try:
        assert process.stderr is not None
        while not any("Listening at" in line for line in log):
            line = process.stderr.readline()
            assert line, f"gunicorn did not start: {''.join(log)}"
            log.append(line)
        found = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", "".join(log))
        assert found is not None
        # Keep reading its log, so that a full pipe never blocks a worker.
        drain = threading.Thread(target=lambda: log.extend(process.stderr or ()), daemon=True)
        drain.start()
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(30)
    assert not any("Traceback" in line or "[ERROR]" in line for line in log), "".join(log)


def post_at_once(base: str, user: str, count: int) -> List[Tuple[int, str, bytes]]:
    """``count`` chat posts of ``user`` released together."""
    barrier = threading.Barrier(count)

    def one(i: int) -> Tuple[int, str, bytes]:
        barrier.wait(30)
        status, headers, raw = call(base, "/chat", user, {"message": f"message {i}"})
        return status, headers.get("Content-Type", ""), raw

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


@needs_gunicorn
@pytest.mark.slow
def test_under_gunicorn_with_two_workers(tmp_path: Path) -> None:
    """Works as ``app:app`` under gunicorn; the run, its events and the approval may each
    be served by another worker: the store is the state."""
    with gunicorn(tmp_path) as base:
        first = events(base, "/chat", "erin", {"message": "email ada@example.com"})
        (calls,) = [data["calls"] for event, data in first if event == "approval"]
        for _ in range(3):  # whichever worker answers, the pending call is in the store
            assert json.loads(call(base, "/history", "erin")[2])["pending"] == calls
        done = events(base, "/approve", "erin", {"approvals": {calls[0]["id"]: True}})
        assert done[-1] == ("done", {"subtype": "success", "error": None})


@needs_gunicorn
@pytest.mark.slow
def test_concurrent_posts_of_one_user_start_one_run_and_are_told_readably(tmp_path: Path
                                                                          ) -> None:
    with gunicorn(tmp_path, WEB_CHAT_MODEL_DELAY_S="0.5") as base:
        answers = post_at_once(base, "frank", 20)
        statuses = [status for status, _, _ in answers]
        assert all(s < 500 for s in statuses), answers
        accepted = [json.loads(raw) for status, _, raw in answers if status == 202]
        # One run at a time: a post is accepted only when no run is going (one that waited
        # out the lock after the first run ended is a new run, legitimately); the others
        # were told, readably.
        assert 1 <= len(accepted) < 20, statuses
        for status, kind, raw in answers:
            if status == 409:
                assert kind.startswith("text/plain"), kind
                assert "still answering your other request" in raw.decode(), raw
        for run in accepted:
            assert follow(base, "frank", run["run_id"], run["after"])[-1][0] == "done"
        history = SqliteHistoryStore(str(tmp_path / "chat.db"), session_id="frank").load()
    assert_well_formed(history)
    assert len([m for m in history if m["role"] == "user"]) == len(accepted)  # each ran once


@needs_gunicorn
@pytest.mark.slow
def test_a_stale_approval_is_a_readable_409(tmp_path: Path) -> None:
    with gunicorn(tmp_path) as base:
        first = events(base, "/chat", "hana", {"message": "email ada@example.com"})
        (calls,) = [data["calls"] for event, data in first if event == "approval"]
        decision = {"approvals": {calls[0]["id"]: True}}

        def approve() -> Tuple[int, Dict[str, str], bytes]:
            return call(base, "/approve", "hana", decision)

        with ThreadPoolExecutor(2) as pool:  # the same click in two tabs, at once
            answers = list(pool.map(lambda _: approve(), range(2)))
        (started,) = [json.loads(raw) for status, _, raw in answers if status == 202]
        follow(base, "hana", started["run_id"], started["after"])
        answers.append(approve())  # and once more, later
        statuses = sorted(status for status, _, _ in answers)
        assert statuses == [202, 409, 409], answers
        for status, headers, raw in answers:
            if status == 409:
                text = raw.decode()
                assert headers["Content-Type"].startswith("text/plain")
                assert ("already" in text and "reload" in text.lower()) or \
                    "still answering" in text, text
                assert "toolu_" not in text and "approvals" not in text, text
        history = json.loads(call(base, "/history", "hana")[2])
        assert history["pending"] == [] and history["messages"][-1]["text"].startswith("Done")
