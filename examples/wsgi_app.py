"""A WSGI chat app: one conversation per user, all of them in one SQLite file, or in one
PostgreSQL table when ``DATABASE_URL`` is set.

    python examples/wsgi_app.py --port 8000 --db .agent-sessions/chat.db
    curl -H 'X-User-Id: ada' --data 'My name is Ada.' http://127.0.0.1:8000/
    curl 'http://127.0.0.1:8000/?user=ada&q=What+is+my+name%3F'
    curl 'http://127.0.0.1:8000/history?user=ada'

    # many worker processes (and hosts), one database server:
    DATABASE_URL=postgresql://app@db.internal/chat \
        gunicorn -w 4 --pythonpath examples 'wsgi_app:make_app()'

Every request builds its own Agent: an Agent is one conversation, not a shared client.
The conversation itself lives in the store under the user's id, so each request continues
it, after a restart too, and from any worker process sharing the store. Two requests of
one user at once, in one process or in two, take turns: the store's session lock is held
for each query, and the second waits for it (up to ``LOCK_WAIT_S``, then 409 Conflict).

Offline by default (a model that echoes, so it runs anywhere); with ANTHROPIC_API_KEY set
it talks to the real API (model from LATTICE_MODEL, default claude-sonnet-4-5).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import urllib.request
from socketserver import ThreadingMixIn
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import lattice
from lattice.stores import PostgresHistoryStore, SqliteHistoryStore
from lattice.testing import FunctionModelClient

MODEL = os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")
USER_ID = re.compile(r"[A-Za-z0-9_.@-]{1,64}\Z")
MAX_BODY = 64 * 1024
LOCK_WAIT_S = 30.0  # how long a request waits for the same user's request in flight

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]


def echo_model(request: lattice.ModelRequest) -> str:
    """The offline model: repeats the last prompt and counts the user's earlier ones, which
    shows that each request saw the whole stored conversation."""
    said = [m["content"] for m in request.messages if isinstance(m.get("content"), str)]
    return f"You said {said[-1]!r}; that is message {len(said)} from you in this conversation."


def default_model_client() -> Any:
    if os.environ.get("ANTHROPIC_API_KEY"):
        return lattice.AnthropicClient()
    return FunctionModelClient(echo_model)


class ChatApp:
    """The WSGI application: ``ChatApp(db_path)(environ, start_response)``.

    With ``database_url`` (default: the ``DATABASE_URL`` environment variable) the
    conversations are kept in PostgreSQL instead of the SQLite file ``db_path``.
    """

    def __init__(self, db_path: str = ".agent-sessions/chat.db", *, model: str = MODEL,
                 model_client: Any = None, database_url: Optional[str] = None) -> None:
        url = database_url if database_url is not None else os.environ.get("DATABASE_URL")
        # Stores made with with_session share this one's connections; "-" is never used.
        self._sessions: Any = (PostgresHistoryStore(url, "-") if url
                               else SqliteHistoryStore(db_path, "-"))
        self._model = model
        self._client = model_client if model_client is not None else default_model_client()

    @property
    def where(self) -> str:
        """Where the conversations are kept (no password)."""
        return repr(self._sessions)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            status, body = self._route(environ)
        except ValueError as exc:
            status, body = "400 Bad Request", {"error": str(exc)}
        except Exception as exc:  # the API failing, the disk failing, ...
            status, body = "500 Internal Server Error", {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        start_response(status, [("Content-Type", "application/json; charset=utf-8"),
                                ("Content-Length", str(len(data)))])
        return [data]

    def close(self) -> None:
        self._sessions.close()

    def _route(self, environ: Environ) -> Tuple[str, Dict[str, Any]]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        user = environ.get("HTTP_X_USER_ID") or query.get("user", [""])[0]
        if not USER_ID.match(user):
            raise ValueError("give a user id (X-User-Id header or ?user=): "
                             "1-64 letters, digits or _.@-")
        store = self._sessions.with_session(user)
        path = environ.get("PATH_INFO", "/")
        if path == "/history":
            return "200 OK", {"user": user, "history": store.load()}
        if path != "/":
            return "404 Not Found", {"error": f"no route {path}"}
        prompt = _read_prompt(environ, query)
        agent = lattice.Agent(model=self._model, model_client=self._client,
                              history_store=store, session_lock_wait_s=LOCK_WAIT_S)
        try:
            result = agent.prompt(prompt)
        except lattice.ConcurrentQueryError as exc:  # the user's previous request is slow
            return "409 Conflict", {"error": str(exc)}
        return "200 OK", {"user": user, "reply": result.result, "subtype": result.subtype,
                          "history_length": len(agent.get_history())}


def _read_prompt(environ: Environ, query: Dict[str, List[str]]) -> str:
    if environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_BODY:
            raise ValueError(f"the prompt is longer than {MAX_BODY} bytes")
        prompt = str(environ["wsgi.input"].read(length).decode("utf-8", "replace"))
    else:
        prompt = query.get("q", [""])[0]
    if not prompt.strip():
        raise ValueError("give a prompt (POST body or ?q=)")
    return prompt


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def make_app() -> ChatApp:
    """For a WSGI server: ``gunicorn 'wsgi_app:make_app()'`` (``DATABASE_URL``, or the
    SQLite file named by ``CHAT_DB``)."""
    return ChatApp(os.environ.get("CHAT_DB", ".agent-sessions/chat.db"))


def demo(db_path: str, model_client: Any = None) -> List[Dict[str, Any]]:
    """Serve on an ephemeral port, make two requests as one user, and return the replies."""
    app = ChatApp(db_path, model_client=model_client)
    server = make_server("127.0.0.1", 0, app, server_class=ThreadingWSGIServer,
                         handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        first = urllib.request.Request(base + "/", data=b"My name is Ada.",
                                       headers={"X-User-Id": "ada"})
        replies = [_get_json(first), _get_json(base + "/?user=ada&q=What+is+my+name%3F")]
        replies.append(_get_json(base + "/history?user=ada"))
        return replies
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        app.close()


def _get_json(request: Any) -> Dict[str, Any]:
    with urllib.request.urlopen(request, timeout=60) as response:
        result: Dict[str, Any] = json.loads(response.read())
        return result


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Serve one agent conversation per user.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--db", default=".agent-sessions/chat.db",
                        help="the SQLite file (unless DATABASE_URL is set)")
    parser.add_argument("--demo", action="store_true",
                        help="make two requests on an ephemeral port and exit")
    args = parser.parse_args(argv)
    if args.demo:
        for reply in demo(args.db):
            print(json.dumps(reply, ensure_ascii=False))
        return
    app = ChatApp(args.db)
    with make_server(args.host, args.port, app, server_class=ThreadingWSGIServer) as server:
        print(f"serving on http://{args.host}:{server.server_port} (history in {app.where})",
              file=sys.stderr)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            app.close()


if __name__ == "__main__":
    main()
