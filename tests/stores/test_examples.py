"""The persistence examples run end to end (offline)."""

import importlib.util
import os
import sys

import pytest

import lattice

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    try:  # the Agent is written alongside the stores; skip until it can run
        from lattice.testing import ScriptedModelClient

        lattice.Agent(model="m", model_client=ScriptedModelClient([]))
    except Exception as exc:  # pragma: no cover - only while the Agent is unfinished
        pytest.skip(f"lattice.Agent is not usable yet: {exc!r}")


def test_wsgi_app_keeps_one_conversation_per_user(tmp_path):
    wsgi_app = load_example("wsgi_app.py")
    db = str(tmp_path / "chat.db")
    first, second, history = wsgi_app.demo(db)
    assert first["user"] == "ada" and "message 1 from you" in first["reply"]
    assert "What is my name?" in second["reply"] and "message 2 from you" in second["reply"]
    assert second["history_length"] == 4
    assert [m["role"] for m in history["history"]] == ["user", "assistant"] * 2
    # Another user has a conversation of their own in the same file.
    app = wsgi_app.ChatApp(db)
    status = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": "user=bob&q=hi"}
    body = b"".join(app(environ, lambda s, h: status.append(s)))
    assert status == ["200 OK"] and b"message 1 from you" in body
    bad = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": "user=no%20spaces&q=hi"}
    b"".join(app(bad, lambda s, h: status.append(s)))
    assert status[-1].startswith("400")
    app.close()
    assert lattice.SqliteHistoryStore(db, "x").list_sessions() == ["ada", "bob"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths in the child command")
def test_resume_jsonl_in_a_second_process(tmp_path):
    resume = load_example("resume_jsonl.py")
    path = str(tmp_path / "sessions" / "ada.jsonl")
    first, second = resume.demo(path)
    assert first["pid"] != second["pid"]
    assert first["messages_sent_to_model"] == ["user"]
    # The second process sent the first process's messages along with its own prompt.
    assert second["messages_sent_to_model"] == ["user", "assistant", "user"]
    assert second["reply"] == "Your name is Ada."
    stored = lattice.create_jsonl_history_store(path).load()
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
