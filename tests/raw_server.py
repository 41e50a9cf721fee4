"""A raw scripted HTTP server on 127.0.0.1 and the Anthropic wire bodies it serves.

Used by the AnthropicClient wire tests (test_anthropic_client_http*.py) so every byte on
the wire is under the test's control; the ``raw`` fixture in conftest.py starts and closes it.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lattice import AnthropicClient, ModelRequest
from lattice.models.retry import RetryPolicy

SECRET = "sk-ant-SECRET-do-not-leak-123"


class RawServer:
    """Answers each POST with the next scripted (status, headers, body) or callable."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.requests = []
        self.closing = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.requests.append({"method": "POST", "path": self.path,
                                       "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": json.loads(raw)})
                item = outer.responses.pop(0) if outer.responses else message_json()
                if callable(item):
                    item(self, outer)
                    return
                status, headers, body = item
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if isinstance(body, (dict, list)):
                    body = json.dumps(body)
                data = body.encode() if isinstance(body, str) else body
                if "content-type" not in {k.lower() for k in headers}:
                    self.send_header("content-type", "application/json")
                self.send_header("connection", "close")
                if headers.get("content-type") != "text/event-stream":
                    self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()

    def close(self):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-served",
           "content": [{"type": "text", "text": "hi there"}], "stop_reason": "end_turn",
           "stop_sequence": None,
           "usage": {"input_tokens": 10, "output_tokens": 2, "cache_creation_input_tokens": 3,
                     "cache_read_input_tokens": 4}}


def message_json(message=None, status=200, headers=None):
    return status, dict(headers or {}, **{"request-id": "req_ok"}), message or MESSAGE


def error_json(status, message, type="some_error", headers=None):
    return (status, dict(headers or {}, **{"request-id": f"req_{status}"}),
            {"type": "error", "error": {"type": type, "message": message}})


def sse(*events):
    text = "".join(f"event: {e.get('type', 'x')}\ndata: {json.dumps(e)}\n\n" if isinstance(e, dict)
                   else e for e in events)
    return 200, {"content-type": "text/event-stream", "request-id": "req_sse"}, text


def start(usage=None):
    return {"type": "message_start", "message": {
        "id": "msg_stream", "type": "message", "role": "assistant", "model": "claude-streamed",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 1,
                           "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4}}}


STOP = {"type": "message_stop"}


def text_block(index, *parts):
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}},
            *[{"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": p}} for p in parts],
            {"type": "content_block_stop", "index": index}]


def delta(stop_reason="end_turn", **usage):
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                               "stop_sequence": None},
            "usage": usage or {"output_tokens": 5}}


def request(**kw):
    kw.setdefault("model", "claude-test")
    kw.setdefault("messages", [{"role": "user", "content": "hello"}])
    return ModelRequest(**kw)


def client(server, waits=None, **kw):
    """A client of ``server``; its retry waits are recorded in ``waits``, never slept."""
    kw.setdefault("api_key", SECRET)
    sleep = (waits if waits is not None else []).append
    kw["retry_policy"] = RetryPolicy(max_retries=kw.pop("max_retries", 0), sleep=sleep)
    return AnthropicClient(base_url=server.url, **kw)
