"""A chat page whose agent runs in background jobs, with Approve / Deny buttons for tool calls.

    python examples/web_chat/app.py [PORT]          # then open http://127.0.0.1:8000/
    gunicorn --pythonpath examples/web_chat -k gthread --threads 8 -w 2 app:app

A message (or an approval) never runs in the web request: the request starts a *run* with a
fresh ``run_id`` in a background job (jobs.py: a thread pool, or Celery workers when
CELERY_BROKER_URL is set) and answers at once with the run's id. The page then follows the
run through ``lattice.follow()`` as Server-Sent Events (``GET /events``), from whichever web
process it reaches: the store is the state, so a reload, a second tab, a killed worker or a
restarted server lose nothing. A reply that needs approval ends its run as
``awaiting_approval``; the Approve / Deny click starts the next run.

Errors are sentences the page shows: a second message while a run is going ("still
answering your other request"), an approval another tab already gave, a lost connection.
A run nobody works on any more (its whole worker was killed) does not freeze the page: the
conversation's session lock is free, so the app says the run was interrupted, a new message
starts a run that supersedes it, and a worker that starts resumes it. A message no worker
has taken yet is shown as queued.

Offline by default: a scripted model behind the bundled mock Messages API server. With
ANTHROPIC_API_KEY set it talks to the real API (ANTHROPIC_BASE_URL and LATTICE_MODEL are
honoured). The history file is WEB_CHAT_DB (default .agent-sessions/web_chat.db).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import sys
import time
from contextlib import closing
from http.cookies import SimpleCookie
from socketserver import ThreadingMixIn
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIServer, make_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # backend.py, jobs.py beside

import jobs  # noqa: E402

import lattice  # noqa: E402

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
USER_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
RUN_ID = re.compile(r"[0-9a-f]{16,64}\Z")
MAX_BODY = 64 * 1024
PAGE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page.html")
FOLLOW_WAIT_S = float(os.environ.get("WEB_CHAT_FOLLOW_WAIT_S", "20"))
# An events response ends after FOLLOW_WAIT_S without news (well under gunicorn's 30 s
# worker timeout), saying why in a last "quiet" event: the run is still going (the page
# follows it again, showing nothing amiss), queued (no worker took it yet), or interrupted.
BUSY = ("I am still answering your other request (from another tab, or a second click). "
        "Wait for that answer, then send this again.")
STALE = ("This call was already answered, maybe in another tab, so nothing changed here. "
         "Reload the page to see where the conversation is.")


class Refused(Exception):
    """A request the app answers with ``status`` and a sentence the page shows as it is."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class ChatApp:
    def __init__(self, db_path: str, runner: Any = None) -> None:
        self.db_path = db_path
        self.runner = runner if runner is not None else jobs.make_runner(db_path)
        self.claims = Claims(db_path)

    def store(self, user: str) -> lattice.SqliteHistoryStore:
        return lattice.SqliteHistoryStore(self.db_path, session_id=user)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Any:
        user, new_cookie = _user_of(environ)
        cookie = [("Set-Cookie", f"uid={user}; Path=/; HttpOnly; SameSite=Lax")]
        headers = cookie if new_cookie else []
        route = (environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/"))
        try:
            if route == ("GET", "/"):
                return _send(start_response, "200 OK", _page(), "text/html", headers)
            if route == ("GET", "/history"):
                return _json(start_response, "200 OK", self.history(user), headers)
            if route == ("POST", "/chat"):
                return _json(start_response, "202 Accepted",
                             self.start_chat(user, _read_json(environ)), headers)
            if route == ("POST", "/approve"):
                return _json(start_response, "202 Accepted",
                             self.start_approval(user, _read_json(environ)), headers)
            if route == ("GET", "/events"):
                body = self.events(user, environ)
                start_response("200 OK", headers + [
                    ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
                    ("X-Accel-Buffering", "no")])
                return body
            return _send(start_response, "404 Not Found", "no such page", "text/plain", [])
        except Refused as refused:  # busy, or a stale approval: a sentence for the person
            return _send(start_response, refused.status, refused.text, "text/plain", headers)
        except ValueError as exc:  # a bad request: say what was wrong with it
            return _send(start_response, "400 Bad Request", str(exc), "text/plain", headers)

    # -- reading ----------------------------------------------------------------------------

    def history(self, user: str) -> Dict[str, Any]:
        """The stored conversation, the calls waiting for a decision, and the run going on
        (so a reloaded page or a second tab follows it)."""
        store = self.store(user)
        try:
            messages = store.load()
            running = self.going(user, store)
            return {"messages": render(messages), "count": len(messages),
                    "pending": [] if running else
                    [_call_json(c) for c in jobs.pending_calls(user, self.db_path)],
                    "running": running}
        finally:
            store.close()

    def going(self, user: str, store: lattice.SqliteHistoryStore,
              run_id: Optional[str] = None, holding: bool = False
              ) -> Optional[Dict[str, Any]]:
        """The run going on in the conversation (``{"run_id", "after", "state"}``, state
        ``running`` or ``queued`` with the queued ``message``), else None. ``run_id``: that
        run only. A run the store says is ``running`` is going only while a job holds the
        conversation's session lock: one whose worker died is not (a dead holder of this
        host is taken over at once; on another host its lease runs out within seconds).
        ``holding``: the caller holds that lock, so no job is working now."""
        claim = self.claims.last(user)
        if run_id is None:
            run = _running(store)
        else:
            record = store.load_run(run_id)
            run = {"run_id": run_id, "after": record.get("index", 0)} if record is not None \
                and record.get("state") == "running" else None
        if run is not None and not holding and _held(store):
            return dict(run, state="running")
        if claim is not None and (run_id is None or claim["run_id"] == run_id) and \
                store.load_run(claim["run_id"]) is None and claim["age_s"] < Claims.GRACE_S:
            return {"run_id": claim["run_id"], "after": claim["after"], "state": "queued",
                    "message": claim["message"]}
        return None

    def events(self, user: str, environ: Environ) -> Iterator[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        run_id = (query.get("run") or [""])[0]
        if not RUN_ID.match(run_id):
            raise ValueError("GET /events takes ?run=<run id>&after=<count>")
        after = environ.get("HTTP_LAST_EVENT_ID") or (query.get("after") or ["0"])[0]
        if not after.isdigit():
            raise ValueError("after must be a count of messages")
        return EventStream(self, user, run_id, int(after))

    # -- starting runs ------------------------------------------------------------------------

    def start_chat(self, user: str, body: Dict[str, Any]) -> Dict[str, Any]:
        message = body.get("message")
        if not isinstance(message, str) or not message.strip():
            raise ValueError('POST /chat takes {"message": "some text"}')
        return self._start(user, message=message)

    def start_approval(self, user: str, body: Dict[str, Any]) -> Dict[str, Any]:
        decisions = body.get("approvals")
        if not isinstance(decisions, dict) or not decisions or not all(
                isinstance(v, bool) for v in decisions.values()):
            raise ValueError('POST /approve takes {"approvals": {"<call id>": true}}')
        return self._start(user, approvals=decisions)

    def _start(self, user: str, **what: Any) -> Dict[str, Any]:
        """Start a run unless one is going: checked and claimed under the conversation's
        session lock, so two tabs (or two gunicorn workers) cannot both start one. A run
        holds the lock while it works; so, holding it here, a run the store still says is
        ``running`` was cut off (its worker died): the new run supersedes it."""
        store = self.store(user)
        try:
            with store.lock(wait_s=0.5):  # a run holds it while it works: busy
                if self.going(user, store, holding=True) is not None:  # a job not begun yet
                    raise Refused("409 Conflict", BUSY)
                if "approvals" in what and set(what["approvals"]) != {
                        c.id for c in jobs.pending_calls(user, self.db_path)}:
                    raise Refused("409 Conflict", STALE)  # another tab answered them
                after = len(store.load())
                run_id = secrets.token_hex(12)
                self.claims.claim(user, run_id, after, what.get("message"))
        except lattice.ConcurrentQueryError:
            raise Refused("409 Conflict", BUSY) from None
        finally:
            store.close()
        self.runner.submit(user, run_id, **what)
        return {"run_id": run_id, "after": after}


class Claims:
    """Runs the app started but whose job may not have begun yet (a queued Celery job):
    while one is open, the conversation is busy. In the same SQLite file as the history."""

    GRACE_S = 60.0  # a job that never began in this long is not waited for any more

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path

    def _db(self) -> sqlite3.Connection:
        folder = os.path.dirname(os.path.abspath(self.db_path))
        os.makedirs(folder, exist_ok=True)
        db = sqlite3.connect(self.db_path, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS web_chat_claims (user TEXT PRIMARY KEY, "
                   "run_id TEXT NOT NULL, after INTEGER NOT NULL, at REAL NOT NULL, "
                   "message TEXT)")
        return db

    def claim(self, user: str, run_id: str, after: int, message: Optional[str]) -> None:
        with closing(self._db()) as db, db:
            db.execute("INSERT OR REPLACE INTO web_chat_claims VALUES (?, ?, ?, ?, ?)",
                       (user, run_id, after, time.time(), message))

    def last(self, user: str) -> Optional[Dict[str, Any]]:
        """The user's last claimed run: ``{"run_id", "after", "age_s", "message"}``."""
        with closing(self._db()) as db:
            row = db.execute("SELECT run_id, after, at, message FROM web_chat_claims "
                             "WHERE user = ?", (user,)).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "after": row[1], "age_s": time.time() - row[2],
                "message": row[3]}


class EventStream:
    """The WSGI body of ``GET /events``: the run's messages as Server-Sent Events, read
    from the store with ``lattice.follow``. Each event's id is the number of messages the
    page has then, so a reconnecting EventSource (``Last-Event-ID``) misses nothing."""

    def __init__(self, app: ChatApp, user: str, run_id: str, after: int) -> None:
        self.app, self.user, self.run_id, self.after = app, user, run_id, after
        self.stop = lattice.AbortController()

    def __iter__(self) -> Iterator[bytes]:
        yield b"retry: 1000\n\n"
        store = self.app.store(self.user)
        count = self.after
        ended = False
        try:
            for item in lattice.follow(store, run_id=self.run_id, after=self.after,
                                       poll_s=0.1, wait_s=FOLLOW_WAIT_S,
                                       signal=self.stop.signal):
                if item.type == "result":
                    if item.subtype == "awaiting_approval":
                        calls = jobs.pending_calls(self.user, self.app.db_path)
                        yield _sse("approval", {"calls": [_call_json(c) for c in calls]})
                    yield _sse("done", {"subtype": item.subtype,
                                        "error": item.result if item.is_error else None},
                               count)
                    ended = True
                elif item.type == "system":
                    yield _sse("shown", {"items": [{"role": "note", "text":
                                                    "(earlier messages were summarised)"}]})
                else:
                    count += 1
                    yield _sse("shown", {"items": render([item.message])}, count)
            if not ended and not self.stop.signal.aborted:  # FOLLOW_WAIT_S without news
                going = self.app.going(self.user, store, self.run_id)
                yield _sse("quiet", {"state": going["state"] if going else "interrupted"})
        finally:
            store.close()

    def close(self) -> None:
        self.stop.abort("the page went away")


def _held(store: lattice.SqliteHistoryStore) -> bool:
    """Whether a job holds the conversation's session lock now (is working on it)."""
    try:
        with store.lock(wait_s=0):
            return False
    except lattice.ConcurrentQueryError:
        return True


def _running(store: lattice.SqliteHistoryStore) -> Optional[Dict[str, Any]]:
    """The run going on in this conversation, as ``{"run_id", "after"}``, else None."""
    runs = store.list_runs(state="running")
    if not runs:
        return None
    last = runs[-1]
    return {"run_id": last["run_id"], "after": last.get("index", 0)}


def render(history: List[Dict[str, Any]]) -> List[Dict[str, str]]:
    """Stored messages as the page shows them: user, assistant, call and result."""
    shown: List[Dict[str, str]] = []
    for message in history:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block.get("type") == "text" and block.get("text"):
                shown.append({"role": message["role"], "text": block["text"]})
            elif block.get("type") == "tool_use":
                shown.append({"role": "call",
                              "text": _call_text(block["name"], block.get("input"))})
            elif block.get("type") == "tool_result":
                shown.append({"role": "result", "text": _content_text(block.get("content"))})
    return shown


def _call_text(name: str, arguments: Any) -> str:
    """A tool call as a person reads it: ``send_email — to: ada@example.com, subject:
    Hello`` (text values as they are, other values as JSON), not the raw JSON object."""
    if not isinstance(arguments, dict) or not arguments:
        return name if not arguments else f"{name} — {json.dumps(arguments)}"
    parts = [f"{key}: {value if isinstance(value, str) else json.dumps(value)}"
             for key, value in arguments.items()]
    return f"{name} — {', '.join(parts)}"


def _call_json(call: lattice.ToolCall) -> Dict[str, Any]:
    return {"id": call.id, "name": call.name, "input": call.input,
            "text": _call_text(call.name, call.input)}


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def _sse(event: str, data: Dict[str, Any], event_id: Optional[int] = None) -> bytes:
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _user_of(environ: Environ) -> Tuple[str, bool]:
    """The user id from the ``uid`` cookie, or a new one (and True: set the cookie)."""
    cookie = SimpleCookie(environ.get("HTTP_COOKIE", ""))
    if "uid" in cookie and USER_ID.match(cookie["uid"].value):
        return cookie["uid"].value, False
    return secrets.token_hex(8), True


def _read_json(environ: Environ) -> Dict[str, Any]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length > MAX_BODY:
        raise ValueError(f"the request body is longer than {MAX_BODY} bytes")
    try:
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body


def _json(start_response: StartResponse, status: str, value: Any,
          headers: List[Tuple[str, str]]) -> List[bytes]:
    return _send(start_response, status, json.dumps(value), "application/json", headers)


def _send(start_response: StartResponse, status: str, text: str, kind: str,
          headers: List[Tuple[str, str]]) -> List[bytes]:
    data = text.encode("utf-8")
    start_response(status, headers + [("Content-Type", f"{kind}; charset=utf-8"),
                                      ("Content-Length", str(len(data)))])
    return [data]


def _page() -> str:
    with open(PAGE_FILE, encoding="utf-8") as page:
        return page.read()


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


app = ChatApp(jobs.DB_PATH)

if __name__ == "__main__":
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PORT", "8000"))
    resumed = app.runner.resume_unfinished()  # runs a stopped server left going
    with make_server("127.0.0.1", port, app, server_class=ThreadingWSGIServer) as server:
        print(f"serving on http://127.0.0.1:{server.server_port}/ (history in {app.db_path}"
              f"{f', {resumed} runs resumed' if resumed else ''})", file=sys.stderr, flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            app.runner.close()
