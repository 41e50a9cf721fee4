"""examples/web_chat/app.py over real HTTP (wsgiref in a thread, urllib as the browser):
a streamed reply that asks for approval, Approve / Deny in a later request, the history
page, bad requests. tests/test_web_chat_browser.py drives the same page in Chromium."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

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
def serve(db_path: Path) -> Iterator[Tuple[str, Any]]:
    """The app on an ephemeral port of 127.0.0.1: ``(base url, ChatApp)``."""
    module = load_app_module()
    app = module.ChatApp(str(db_path))
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
        app.backend.close()


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
    """POST, then parse the Server-Sent Events of the streamed reply."""
    status, headers, raw = call(base, path, user, body)
    assert status == 200 and headers["Content-Type"] == "text/event-stream", raw
    parsed = []
    for chunk in raw.decode().split("\n\n"):
        if chunk:
            event, data = chunk.split("\n")
            parsed.append((event[len("event: "):], json.loads(data[len("data: "):])))
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
    assert len(texts(first, "text")) > 1  # streamed in pieces
    assert "".join(texts(first, "text")) == "Sure, I will email ada@example.com for you."
    assert texts(first, "call") == ['send_email({"to": "ada@example.com", "subject": "Hello"})']
    (calls,) = [data["calls"] for event, data in first if event == "approval"]
    assert first[-1] == ("done", {"subtype": "awaiting_approval", "error": None})

    status, _, raw = call(base, "/history", "alice")
    history = json.loads(raw)
    assert status == 200 and history["pending"] == calls
    assert [m["role"] for m in history["messages"]] == ["user", "assistant", "call"]

    second = events(base, "/approve", "alice", {"approvals": {calls[0]["id"]: True}})
    result = "Email to ada@example.com with subject 'Hello' queued as message #1."
    assert texts(second, "result") == [result]
    assert "".join(texts(second, "text")) == f"Done: {result}"
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
    assert "".join(texts(denied, "text")).startswith("I could not send it:")
    # Another user has a conversation of their own; a visitor without a cookie gets one.
    assert json.loads(call(base, "/history", "carol")[2]) == {"messages": [], "pending": []}
    status, headers, page = call(base, "/", None)
    assert status == 200 and b'class="approve"' not in page and b"askApproval" in page
    assert headers["Set-Cookie"].startswith("uid=")
    plain = events(base, "/chat", "bob", {"message": "thanks"})
    assert "".join(texts(plain, "text")).startswith("You said: thanks")


def test_bad_requests_are_400_naming_the_problem(served):
    base, _ = served
    for path, body, says in [
        ("/chat", {"message": ""}, '{"message"'),
        ("/chat", b"not json", "not JSON"),
        ("/chat", [1], "JSON object"),
        ("/approve", {"approvals": {"x": "yes"}}, '{"approvals"'),
        ("/approve", {"approvals": {"x": True}}, "pending calls []"),
    ]:
        status, _, raw = call(base, path, "dave", body)
        assert status == 400 and says in raw.decode(), (path, body, raw)
    assert call(base, "/nowhere", "dave")[0] == 404
    events(base, "/chat", "dave", {"message": "email x@example.com"})
    status, _, raw = call(base, "/approve", "dave", {"approvals": {"wrong-id": True}})
    assert status == 400 and "toolu_" in raw.decode()
    # The refused approval changed nothing: the call is still pending.
    assert len(json.loads(call(base, "/history", "dave")[2])["pending"]) == 1


@pytest.mark.slow
def test_under_gunicorn_with_two_workers(tmp_path):
    """Works as ``app:app`` under gunicorn; the approval may land in another worker."""
    pytest.importorskip("gunicorn", reason="gunicorn is not installed (optional here)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONPATH=str(APP_PATH.parents[2]), WEB_CHAT_DB=str(tmp_path / "chat.db"))
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--pythonpath", str(APP_PATH.parent), "-w", "2",
         "-b", "127.0.0.1:0", "app:app"], env=env, cwd=tmp_path, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        seen = ""
        while "Listening at" not in seen:  # gunicorn logs the port it bound
            line = process.stderr.readline()
            assert line, f"gunicorn did not start: {seen}"
            seen += line
        base = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", seen).group(1)
        first = events(base, "/chat", "erin", {"message": "email ada@example.com"})
        (calls,) = [data["calls"] for event, data in first if event == "approval"]
        for _ in range(3):  # whichever worker answers, the pending call is in the store
            assert json.loads(call(base, "/history", "erin")[2])["pending"] == calls
        done = events(base, "/approve", "erin", {"approvals": {calls[0]["id"]: True}})
        assert done[-1] == ("done", {"subtype": "success", "error": None})
    finally:
        process.terminate()
        process.communicate(timeout=30)
