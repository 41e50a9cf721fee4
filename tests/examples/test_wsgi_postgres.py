"""examples/wsgi_app.py on PostgreSQL (``DATABASE_URL`` set), against the throwaway server:
its WSGI callable over real HTTP, its ``--demo`` run as a user runs it, and gunicorn with two
worker processes serving one user's simultaneous requests in turn."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path
from wsgiref.simple_server import make_server

import pytest
import real_parts

from lattice.stores import PostgresHistoryStore
from lattice.testing import assert_well_formed

real_parts.require("psycopg")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "wsgi_app.py"
SAID = re.compile(r"You said '(.*)'; that is message (\d+) from you")


def load_example():
    spec = importlib.util.spec_from_file_location("example_wsgi_app_pg", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def offline_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8", **extra)
    return env


def post(base, user, text):
    request = urllib.request.Request(base + "/", data=text.encode(), headers={
        "X-User-Id": user})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def get(url):
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def check_taking_turns(conninfo, user, replies, before):
    """Each reply saw every earlier prompt of the user (so the queries ran one after the
    other), and the stored conversation is those turns, whole, in order."""
    counts = sorted(int(SAID.search(r["reply"]).group(2)) for r in replies)
    assert counts == list(range(before + 1, before + 1 + len(replies))), counts
    stored = PostgresHistoryStore(conninfo, user).load()
    assert_well_formed(stored, strict_roles=True)
    assert len(stored) == 2 * (before + len(replies))
    for prompt, answer in zip(stored[::2], stored[1::2]):
        said = SAID.search(answer["content"][0]["text"])
        assert said.group(1) == prompt["content"]


@pytest.fixture
def pg_app(postgres_server, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", postgres_server.url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    wsgi_app = load_example()
    app = wsgi_app.ChatApp(os.devnull)  # the file is not used: DATABASE_URL is set
    assert "PostgresHistoryStore" in app.where
    server = make_server("127.0.0.1", 0, app, server_class=wsgi_app.ThreadingWSGIServer,
                         handler_class=wsgi_app.QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        app.close()


def test_the_wsgi_app_keeps_conversations_in_postgres(pg_app, postgres_server):
    user = f"ada-{uuid.uuid4().hex[:8]}"
    first = post(pg_app, user, "My name is Ada.")
    assert first["user"] == user and "message 1 from you" in first["reply"]
    second = get(f"{pg_app}/?user={user}&q=What+is+my+name%3F")
    assert "message 2 from you" in second["reply"] and second["history_length"] == 4
    history = get(f"{pg_app}/history?user={user}")["history"]
    assert history == PostgresHistoryStore(postgres_server.conninfo, user).load()
    assert [m["content"] for m in history[::2]] == ["My name is Ada.", "What is my name?"]


def post_at_once(app, user, count):
    """``count`` messages of one user sent by as many threads at once; every reply a success."""
    replies = []
    threads = [threading.Thread(target=lambda n=n: replies.append(post(app, user, f"m{n}")))
               for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(replies) == count and all(r["subtype"] == "success" for r in replies)
    return replies


def test_simultaneous_requests_of_one_user_take_turns(pg_app, postgres_server):
    user = f"bob-{uuid.uuid4().hex[:8]}"
    post(pg_app, user, "hello")
    replies = post_at_once(pg_app, user, 8)
    check_taking_turns(postgres_server.conninfo, user, replies, before=1)


def test_the_demo_runs_on_postgres(postgres_server, tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--demo", "--db", str(tmp_path / "unused.db")],
        env=offline_env(DATABASE_URL=postgres_server.url), cwd=tmp_path, text=True,
        capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"history_length": 4' in done.stdout and "message 2 from you" in done.stdout
    assert not (tmp_path / "unused.db").exists()
    assert len(PostgresHistoryStore(postgres_server.conninfo, "ada").load()) >= 4


@pytest.mark.slow
def test_two_gunicorn_workers_on_postgres_serve_one_user_in_turn(postgres_server, tmp_path):
    real_parts.require("gunicorn")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--pythonpath", str(EXAMPLE.parent), "-w", "2",
         "--threads", "4", "-b", "127.0.0.1:0", "wsgi_app:make_app()"],
        env=offline_env(DATABASE_URL=postgres_server.url), cwd=tmp_path, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        seen = ""
        while "Listening at" not in seen:  # gunicorn logs the port it bound
            line = process.stderr.readline()
            assert line, f"gunicorn did not start: {seen}"
            seen += line
        base = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", seen).group(1)
        user = f"carol-{uuid.uuid4().hex[:8]}"
        replies = post_at_once(base, user, 12)
        check_taking_turns(postgres_server.conninfo, user, replies, before=0)
    finally:
        process.terminate()
        process.communicate(timeout=30)
