"""``MockMessagesServer``: a real Messages API server on 127.0.0.1 for offline tests.

It answers ``POST /v1/messages`` with JSON, or with SSE when the request body says
``"stream": true`` (``stream=True|False`` forces one). ``POST /v1/chat/completions`` (and
``/chat/completions``) get the same script in Chat Completions form (``_mock_chat.py``),
``POST /v1/responses`` and the Azure OpenAI routes in their forms (``_mock_responses.py``),
the Bedrock (SigV4-checked, event-stream replies) and Vertex routes in theirs
(``_mock_bedrock.py``), the Gemini API and Vertex Gemini routes in Google's
(``_mock_gemini.py``).
Replies come from a script, one per request, in order; each may be

* a string: a text reply;
* an assistant dict like clients return (``{"content": [...], "stop_reason": ...,
  "usage": {...}}``; ``content`` may be a string; missing tool_use ids are made up);
* a callable ``(request_body) -> reply`` (a chat request's body in Messages shape);
* a fault made by ``MockMessagesServer.error(...)``, ``.delay(...)``, ``.hang(...)``,
  ``.cut_stream(...)``, ``.stream_error(...)``, ``.raw_sse(...)`` or ``.trickle(...)``,
  or a dict naming one: ``{"fault": "error", "status": 529}``.

When the script runs out every further request gets the text reply ``"(mock) ok"``
(``DEFAULT_TEXT``), so a loop that asks once more than planned still finishes; with
``repeat=True`` it starts over instead (each reply used goes back to its end), so
``MockMessagesServer([model_fn], repeat=True)`` answers every request with ``model_fn``.
Usage is made up but realistic: ``input_tokens`` is the request body's length // 4.
A request with ``cache_control`` marks is billed against a simulated prompt cache (cache
reads and writes, as ``lattice.testing._mock_cache`` says); more than 4 marks get a 400.
Stream faults (``hang(after_events=...)``, ``cut_stream``, ``stream_error``, ``trickle``)
answer with SSE even when the request did not ask for a stream.

Streams emit what the real API does: ``message_start``, ``content_block_start``, a
``ping``, deltas (text cut into several ``text_delta``; tool input as
``input_json_delta`` chunks; thinking then its signature), ``content_block_stop``,
``message_delta`` and ``message_stop``. It keeps connections alive (HTTP/1.1), sends
``Content-Length`` for JSON and chunked SSE, and writes each response in one send.

Like the real API it answers 400 ``invalid_request_error`` to a request the API refuses
(``_mock_checks.request_problem``, ``chat_request_problem`` on the Chat Completions
route; not recorded, no scripted reply used up), unless made
with ``strict=False``; and it serves ``POST /v1/messages/count_tokens``.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

from ..models.wire import message_events
from . import _mock_script as faults
from ._mock_bedrock import DEFAULT_BEDROCK_CREDENTIALS
from ._mock_cache import PromptCache, breakpoint_problem
from ._mock_handler import _Handler as _Handler  # the route modules type with it
from ._mock_handler import _Server
from ._mock_script import _FAULT_MAKERS, DEFAULT_TEXT, Fault, _check_reply

__all__ = ["MockMessagesServer", "Fault", "message_events"]


def _resolve(reply: Any) -> Any:
    """``reply`` with a fault-naming dict turned into its ``Fault``; a clear ValueError
    for anything the server could not answer with."""
    if isinstance(reply, dict) and "fault" in reply:
        spec = dict(reply)
        name = spec.pop("fault")
        if name not in _FAULT_MAKERS:
            raise ValueError(f"MockMessagesServer: unknown fault {name!r} in {reply!r}; "
                             f"one of {list(_FAULT_MAKERS)}")
        try:
            return getattr(faults, name)(**spec)
        except TypeError as exc:
            raise ValueError(f"MockMessagesServer: bad fault {reply!r}: {exc}") from None
    _check_reply(reply)
    return reply


class MockMessagesServer:
    """A local Messages API server; use as a context manager or ``start()``/``close()``.

    Attributes:
        base_url: ``http://127.0.0.1:<port>``, for ``AnthropicClient(base_url=...)``.
        requests: parsed JSON body of every request (Messages and chat), in order.
        request_headers: the matching headers (lower-case names).
        bedrock_credentials: ``(access_key_id, secret_access_key)`` the Bedrock routes
            check signatures against (default ``("mock-access-key-id",
            "mock-secret-access-key")``).
        vertex_token: the bearer token the Vertex routes want (None: any).
        azure_api_key: the ``api-key`` the Azure routes want (None: any non-empty key).
        gemini_key: the ``x-goog-api-key`` the Gemini API routes want (None: any).
    """

    __test__ = False  # not a pytest test class
    DEFAULT_TEXT = DEFAULT_TEXT

    def __init__(
        self,
        replies: Optional[List[Any]] = None,
        *,
        stream: Optional[bool] = None,
        model: str = "claude-mock-1",
        record: bool = True,
        strict: bool = True,
        repeat: bool = False,
        bedrock_credentials: Tuple[str, str] = DEFAULT_BEDROCK_CREDENTIALS,
        vertex_token: Optional[str] = None,
        azure_api_key: Optional[str] = None,
        gemini_key: Optional[str] = None,
    ) -> None:
        for name, value in (("repeat", repeat), ("record", record), ("strict", strict)):
            if not isinstance(value, bool):
                raise ValueError(f"MockMessagesServer: {name} must be a bool, got {value!r}")
        if stream is not None and not isinstance(stream, bool):
            raise ValueError(f"MockMessagesServer: stream must be a bool or None, got "
                             f"{stream!r}")
        self.repeat = repeat
        # Bedrock routes check SigV4 against these; Vertex routes want this bearer token
        # (None: any). See _mock_bedrock.py.
        self.bedrock_credentials = tuple(bedrock_credentials)
        self.vertex_token = vertex_token
        if azure_api_key is not None and (not isinstance(azure_api_key, str)
                                          or not azure_api_key):
            raise ValueError("MockMessagesServer: azure_api_key must be a non-empty str or "
                             f"None, got {type(azure_api_key).__name__}")
        self.azure_api_key = azure_api_key  # what Azure routes want as api-key (None: any)
        self.gemini_key = gemini_key  # the x-goog-api-key the Gemini API routes want
        self._gemini_signatures: Set[str] = set()  # thought signatures the mock gave
        self.stream = stream
        self.strict = strict
        self.model = model
        self.record = record
        self.requests: List[Dict[str, Any]] = []
        self.request_headers: List[Dict[str, str]] = []
        self._replies = list(replies or [])
        for reply in self._replies:
            _resolve(reply)  # a bad script fails here, naming the reply
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closing = threading.Event()
        self._sockets: Set[socket.socket] = set()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._cache = PromptCache()  # cache_control marks are billed as the API would

    # -- faults (see _mock_script.py) ------------------------------------------------
    error = staticmethod(faults.error)
    delay = staticmethod(faults.delay)
    hang = staticmethod(faults.hang)
    cut_stream = staticmethod(faults.cut_stream)
    stream_error = staticmethod(faults.stream_error)
    raw_sse = staticmethod(faults.raw_sse)
    trickle = staticmethod(faults.trickle)

    # -- script and lifecycle -------------------------------------------------------
    def add(self, *replies: Any) -> None:
        """Append replies to the script."""
        for reply in replies:
            _resolve(reply)
        with self._lock:
            self._replies.extend(replies)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("MockMessagesServer is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> MockMessagesServer:
        if self._server is None:
            self._server = _Server(self)
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                name="lattice-mock-server", daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; hanging replies end and open connections are shut."""
        self._closing.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> MockMessagesServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.base_url if self._server is not None else "not started"
        return f"<MockMessagesServer {where}, {len(self.requests)} requests>"

    # -- serving (called from handler threads) ----------------------------------------
    def _take(self, body: Dict[str, Any], headers: Dict[str, str],
              script_body: Optional[Dict[str, Any]] = None) -> Any:
        with self._lock:
            if self.record:
                self.requests.append(body)
                self.request_headers.append(headers)
            problem = breakpoint_problem(body)  # refused like the API: no reply used
            if problem is not None:
                return Fault("error", status=400, message=problem)
            if self._replies:
                reply = self._replies.pop(0)
                if self.repeat:  # the script starts over when it runs out
                    self._replies.append(reply)
            else:
                reply = DEFAULT_TEXT
        while callable(reply):  # a chat request's script sees it in Messages shape
            reply = reply(body if script_body is None else script_body)
        try:
            return _resolve(reply)
        except ValueError as exc:  # from a callable: answer so that the client says why
            return Fault("error", status=500, message=str(exc),
                         headers={"x-should-retry": "false"})

    def _message(self, reply: Any, body: Dict[str, Any], size: int) -> Dict[str, Any]:
        spec: Dict[str, Any] = {"content": reply} if isinstance(reply, str) else dict(reply)
        content = spec.get("content") or []
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks = []
        for block in content:
            block = dict(block)
            if block.get("type") == "tool_use" and not block.get("id"):
                block["id"] = f"toolu_mock_{next(self._ids):06d}"
            blocks.append(block)
        stop = spec.get("stop_reason") or (
            "tool_use" if any(b.get("type") == "tool_use" for b in blocks) else "end_turn"
        )
        usage = {
            **self._cache.usage(body, max(1, size // 4)),
            "output_tokens": max(1, len(json.dumps(blocks)) // 4),
        }
        usage.update(spec.get("usage") or {})
        return {
            "id": spec.get("id") or spec.get("provider_response_id")
            or f"msg_mock_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": spec.get("model") or body.get("model") or self.model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": spec.get("stop_sequence"),
            "usage": usage,
        }
