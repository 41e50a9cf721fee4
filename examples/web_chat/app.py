"""A chat page with streamed replies and Approve / Deny buttons for tool calls.

    python examples/web_chat/app.py [PORT]          # then open http://127.0.0.1:8000/
    gunicorn --pythonpath examples/web_chat -w 2 app:app   # the same app under gunicorn

Each request builds ONE Agent on the user's conversation in SQLite (the user id comes from
a cookie): the store is the state, so nothing lives in the process between requests. A
reply that needs approval ends the request as ``awaiting_approval``; the browser shows the
pending call, and the Approve / Deny click is a later request that resumes with
``approvals=``, possibly served by another worker process.

One user may send two requests at once (two tabs, a double click), and under gunicorn they
reach different worker processes: the conversation's session lock in the store keeps them
apart. The second request waits for it up to WEB_CHAT_LOCK_WAIT_S seconds (default 10,
under gunicorn's 30 s worker timeout); if the first is still running then, it is answered
409 with a sentence the page shows ("still answering your other request"). An approval
that another tab already gave is a 409 with a sentence too.

Offline by default: a scripted model behind the bundled mock Messages API server. With
ANTHROPIC_API_KEY set it talks to the real API (model from LATTICE_MODEL). The history
file is WEB_CHAT_DB (default .agent-sessions/web_chat.db).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import sys
import threading
from http.cookies import SimpleCookie
from socketserver import ThreadingMixIn
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIServer, make_server

import lattice
from lattice.testing import MockMessagesServer

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
USER_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
MAX_BODY = 64 * 1024
PAGE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page.html")
LOCK_WAIT_S = float(os.environ.get("WEB_CHAT_LOCK_WAIT_S", "10"))
BUSY = ("I am still answering your other request (from another tab, or a second click). "
        "Wait for that answer, then send this again.")
STALE = ("This call was already answered, maybe in another tab, so nothing changed here. "
         "Reload the page to see where the conversation is.")

OUTBOX: List[Dict[str, str]] = []  # where the demo's "emails" go


@lattice.tool(requires_approval=True)
def send_email(to: str, subject: str) -> str:
    """Send an email (a person must approve every one)."""
    OUTBOX.append({"to": to, "subject": subject})
    return f"Email to {to} with subject {subject!r} queued as message #{len(OUTBOX)}."


# -- the offline model: decides from the request what a model would say ----------------------

def scripted_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """Asks to send_email when the user mentions an address; answers a tool result with a
    sentence quoting it; otherwise echoes."""
    last = body["messages"][-1]["content"]
    blocks = [{"type": "text", "text": last}] if isinstance(last, str) else last
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        content = results[0].get("content")
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content)
        verdict = "I could not send it" if results[0].get("is_error") else "Done"
        return {"content": f"{verdict}: {content}"}
    text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    address = re.search(r"[\w.+-]+@[\w-]+(\.[\w-]+)+", text)
    if address is None:
        return {"content": f"You said: {text}. Mention an email address and I will write."}
    to = address.group(0)
    return {"content": [
        {"type": "text", "text": f"Sure, I will email {to} for you."},
        {"type": "tool_use", "name": "send_email", "input": {"to": to, "subject": "Hello"}}]}


class Backend:
    """Agent options for the model in use; the mock server starts on first use, so
    importing this module (as gunicorn does) starts nothing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._options: Optional[Dict[str, Any]] = None
        self.mock: Optional[MockMessagesServer] = None

    def options(self) -> Dict[str, Any]:
        with self._lock:
            if self._options is None:
                self._options = self._start()
            return self._options

    def _start(self) -> Dict[str, Any]:
        if os.environ.get("ANTHROPIC_API_KEY"):
            return {"model": os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")}
        self.mock = MockMessagesServer([scripted_model], record=False, repeat=True).start()
        return {"model": "mock-model", "base_url": self.mock.base_url,
                "api_key": "offline-mock-key"}

    def close(self) -> None:
        if self.mock is not None:
            self.mock.close()


# -- the WSGI app ----------------------------------------------------------------------------

class Refused(Exception):
    """A request the app answers with ``status`` and a sentence the page shows as it is."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


class ChatApp:
    def __init__(self, db_path: str, backend: Optional[Backend] = None) -> None:
        self.db_path = db_path
        self.backend = backend or Backend()

    def agent(self, store: lattice.SqliteHistoryStore) -> lattice.Agent:
        """One Agent per request, on the user's stored conversation; a second request of
        the same user waits for the first up to LOCK_WAIT_S (the store's session lock)."""
        return lattice.Agent(**self.backend.options(), tools=[send_email],
                             history_store=store, include_partial_messages=True,
                             session_lock_wait_s=LOCK_WAIT_S,
                             system="You are a helpful assistant. You can send emails.")

    def __call__(self, environ: Environ, start_response: StartResponse) -> Any:
        user, new_cookie = _user_of(environ)
        cookie = [("Set-Cookie", f"uid={user}; Path=/; HttpOnly; SameSite=Lax")]
        headers = cookie if new_cookie else []
        route = (environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/"))
        try:
            if route == ("GET", "/"):
                return _send(start_response, "200 OK", _page(), "text/html", headers)
            if route == ("GET", "/history"):
                return _send(start_response, "200 OK", json.dumps(self.history(user)),
                             "application/json", headers)
            if route in (("POST", "/chat"), ("POST", "/approve")):
                events = self.start_query(user, route[1], _read_json(environ))
                start_response("200 OK", headers + [
                    ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
                    ("X-Accel-Buffering", "no")])
                return events
            return _send(start_response, "404 Not Found", "no such page", "text/plain", [])
        except Refused as refused:  # busy, or a stale approval: a sentence for the person
            return _send(start_response, refused.status, refused.text, "text/plain", headers)
        except ValueError as exc:  # a bad request: say what was wrong with it
            return _send(start_response, "400 Bad Request", str(exc), "text/plain", headers)

    def history(self, user: str) -> Dict[str, Any]:
        store = lattice.SqliteHistoryStore(self.db_path, session_id=user)
        try:
            agent = self.agent(store)
            return {"messages": render(agent.get_history()),
                    "pending": [_call_json(c) for c in agent.pending_approvals()]}
        finally:
            store.close()

    def start_query(self, user: str, path: str, body: Dict[str, Any]) -> Iterator[bytes]:
        """Validate and start the query now, up to its first message (so a bad request is
        a 400, a busy conversation or a stale approval a 409), then stream the rest."""
        store = lattice.SqliteHistoryStore(self.db_path, session_id=user)
        try:
            agent = self.agent(store)
            if path == "/chat":
                message = body.get("message")
                if not isinstance(message, str) or not message.strip():
                    raise ValueError('POST /chat takes {"message": "some text"}')
                return EventStream(*_first(lambda: agent.query(message)), store.close)
            decisions = body.get("approvals")
            if not isinstance(decisions, dict) or not decisions or not all(
                    isinstance(v, bool) for v in decisions.values()):
                raise ValueError('POST /approve takes {"approvals": {"<call id>": true}}')
            try:  # lattice checks them against the pending calls, again under the lock
                return EventStream(*_first(lambda: agent.query(approvals=decisions)),
                                   store.close)
            except ValueError:
                raise Refused("409 Conflict", STALE) from None
        except BaseException:
            store.close()
            raise


def _first(start: Callable[[], Any]) -> Tuple[Any, Any]:
    """``(query, its first message)``: the first ``next()`` takes the session lock, waiting
    up to LOCK_WAIT_S, so a busy conversation is known before the response starts."""
    query = start()
    try:
        return query, next(query)
    except lattice.ConcurrentQueryError:
        query.close()
        raise Refused("409 Conflict", BUSY) from None
    except BaseException:
        query.close()
        raise


class EventStream:
    """The WSGI body: the query's messages as Server-Sent Events. The server calls
    ``close()`` when the response ends or the browser goes away, which ends the query."""

    def __init__(self, query: Any, first: Any, done: Callable[[], Any]) -> None:
        self.query, self.first, self._done = query, first, done

    def __iter__(self) -> Iterator[bytes]:
        for message in itertools.chain([self.first], self.query):
            if message.type == "stream_event":
                event = message.event
                if event["type"] == "content_block_delta" and \
                        event["delta"]["type"] == "text_delta":
                    yield _sse("text", {"text": event["delta"]["text"]})
            elif message.type == "assistant":
                for block in message.content:
                    if block.get("type") == "tool_use":
                        yield _sse("call", {"text": _call_text(block)})
            elif message.type == "user" and isinstance(message.content, list):
                for block in message.content:
                    if block.get("type") == "tool_result":
                        yield _sse("result", {"text": _content_text(block.get("content"))})
            elif message.type == "result":
                if message.subtype == "awaiting_approval":
                    yield _sse("approval", {"calls": [_call_json(c)
                                                      for c in message.pending_approvals]})
                yield _sse("done", {"subtype": message.subtype,
                                    "error": message.result if message.is_error else None})

    def close(self) -> None:
        self.query.close()
        done, self._done = self._done, lambda: None
        done()


def render(history: List[Dict[str, Any]]) -> List[Dict[str, str]]:
    """The stored conversation as the page shows it: user, assistant, call and result."""
    shown: List[Dict[str, str]] = []
    for message in history:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            if block.get("type") == "text" and block.get("text"):
                shown.append({"role": message["role"], "text": block["text"]})
            elif block.get("type") == "tool_use":
                shown.append({"role": "call", "text": _call_text(block)})
            elif block.get("type") == "tool_result":
                shown.append({"role": "result", "text": _content_text(block.get("content"))})
    return shown


def _call_text(block: Dict[str, Any]) -> str:
    return f"{block['name']}({json.dumps(block.get('input', {}))})"


def _call_json(call: lattice.ToolCall) -> Dict[str, Any]:
    return {"id": call.id, "name": call.name, "input": call.input}


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def _sse(event: str, data: Dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


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


app = ChatApp(os.environ.get("WEB_CHAT_DB", ".agent-sessions/web_chat.db"))

if __name__ == "__main__":
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PORT", "8000"))
    with make_server("127.0.0.1", port, app, server_class=ThreadingWSGIServer) as server:
        print(f"serving on http://127.0.0.1:{server.server_port}/ (history in {app.db_path})",
              file=sys.stderr, flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            app.backend.close()
