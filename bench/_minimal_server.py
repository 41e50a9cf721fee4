"""A minimal model server for the HTTP benches (issue 28): the floor's own server.

``MockMessagesServer`` parses and checks every request, which costs the server twice what
answering does; on a shared 2-core machine that server time swings the ratios it is used
to measure. This one reads the body without parsing it: the turn is how many
``"role":"assistant"`` the body holds (both wire formats encode it so) plus one, and the
reply (a tool call below ``stop_at`` assistant turns, then text) is made from a template,
as JSON or SSE, for the Messages API (``/v1/messages``) and Chat Completions
(``/v1/chat/completions``). HTTP/1.1 keep-alive, one thread per connection, in a child
process of its own (``minimal_server``): it never shares the measured process's GIL.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STATE = {"stop_at": 50}
_ASSISTANT = b'"role":"assistant"'


def message(turn: int, stop_at: int) -> Dict[str, Any]:
    """The Messages API reply of ``turn``: a tool call below ``stop_at``, then text."""
    usage = {"input_tokens": 10, "output_tokens": 2}
    if turn < stop_at:
        content = [{"type": "text", "text": f"Step {turn}: calling the tool."},
                   {"type": "tool_use", "id": f"toolu_{turn:05d}", "name": "echo",
                    "input": {"text": f"payload for step {turn}"}}]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": f"All {turn} steps done."}], "end_turn"
    return {"id": f"msg_{turn}", "type": "message", "role": "assistant",
            "model": "claude-bench", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": usage}


def _sse_events(events: List[Dict[str, Any]], named: bool) -> bytes:
    out = []
    for event in events:
        data = json.dumps(event, separators=(",", ":")).encode()
        head = b"event: %s\n" % event["type"].encode() if named else b""
        out.append(head + b"data: " + data + b"\n\n")
    return b"".join(out)


def reply_bytes(path: str, turn: int, stop_at: int, stream: bool) -> bytes:
    from lattice.models.wire import message_events
    from lattice.testing._mock_chat import completion_chunks, completion_from_message

    msg = message(turn, stop_at)
    if path.endswith("/chat/completions"):
        completion = completion_from_message(msg)
        if not stream:
            return json.dumps(completion, separators=(",", ":")).encode()
        return _sse_events(completion_chunks(completion), False) + b"data: [DONE]\n\n"
    if not stream:
        return json.dumps(msg, separators=(",", ":")).encode()
    return _sse_events(message_events(msg), True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The headers and the body go out in two writes: with Nagle's algorithm the body waits
    # for the client's delayed ACK of the headers, 40 ms a request (as the mock server, no).
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        turn = body.count(_ASSISTANT) + 1
        stream = b'"stream":true' in body
        data = reply_bytes(self.path.split("?")[0], turn, STATE["stop_at"], stream)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream" if stream else "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # 32 clients connecting at once: no reset connections


def _serve(conn: Any) -> None:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn.send(f"http://127.0.0.1:{server.server_address[1]}")
    while True:
        message_ = conn.recv()
        if message_ == "stop":
            server.shutdown()
            return
        STATE["stop_at"] = message_
        conn.send("ok")


@contextlib.contextmanager
def minimal_server() -> Iterator[Callable[[int], str]]:
    """The server's base URL, given how many assistant turns a conversation ends at."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(child,), daemon=True)
    process.start()
    url = parent.recv()

    def stop_at(n: int) -> str:
        parent.send(n)
        parent.recv()
        return str(url)

    try:
        yield stop_at
    finally:
        parent.send("stop")
        process.join(10)
