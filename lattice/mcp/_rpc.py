"""The JSON-RPC 2.0 core both transports share: ids, pending requests, cancellation, the
server's own requests and notifications, and failing every waiter at once when the
transport dies.

Threads: any number of callers run ``request``/``notify``; the transport hands each
incoming message to ``receive`` from its own thread (stdio: its one reader thread; HTTP:
the thread that made the POST). ``_lock`` guards ``_pending``, ``_next_id``, ``_failure``
and ``_noise``. A ``_Call``'s ``outcome`` is written once, under the lock, by whoever
resolves it (a reply, an error, the transport failing), before its event is set; the
caller reads it after the event, so it needs no lock.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..cancellation import AbortSignal, needs_polling
from ..models.shape import MAX_DEPTH, too_deep, top_level_id
from ..models.urls import redact
from ._errors import MCPError

__all__ = ["RPCSession", "logger"]

logger = logging.getLogger("lattice.mcp")

Message = Dict[str, Any]
Outcome = Union[Message, MCPError]

# MCP log levels (RFC 5424 names) -> logging levels.
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL,
           "alert": logging.CRITICAL, "emergency": logging.CRITICAL}
_NOISE_WARNINGS = 3  # a server that floods stdout is logged at WARNING only this often
_MAX_ROUNDS = 16  # input_required rounds of one request before we call the server broken
_POLL_S = 0.05  # a threading.Event used as a signal cannot call back: poll it this often


class _Call:
    __slots__ = ("method", "event", "outcome")

    def __init__(self, method: str) -> None:
        self.method = method
        self.event = threading.Event()
        self.outcome: Optional[Outcome] = None


class RPCSession:
    """One JSON-RPC conversation with a server, over whatever ``send`` writes to."""

    def __init__(self, server: str, send: Callable[[Message], None], *,
                 abandon: Optional[Callable[[Any], None]] = None,
                 secrets: Sequence[str] = (),
                 more_secrets: Optional[Callable[[], Sequence[str]]] = None) -> None:
        self.server = server
        self._secrets = list(secrets)  # header values, URL parts
        self._more_secrets = more_secrets  # what can change (OAuth's tokens): asked each time
        self._send = send
        self._abandon = abandon  # the transport's "stop the exchange of this request id"
        self._lock = threading.Lock()
        self._pending: Dict[Any, _Call] = {}
        self._next_id = 0
        self._failure: Optional[Tuple[str, str]] = None  # (kind, message) once it failed
        self._noise: Tuple[int, str] = (0, "")  # non-JSON-RPC output: count, last sample
        # The 2026-07-28 wire: what every request carries in its ``_meta`` (None: legacy).
        self.meta: Optional[Message] = None
        # What we answer the server's own requests with (method -> handler(params) ->
        # result; raise MCPError with a code to answer an error), and who hears its
        # notifications (method -> callback(params)). ``ping`` is always answered.
        self.handlers: Dict[str, Callable[[Message], Message]] = {}
        self.listeners: Dict[str, Callable[[Message], None]] = {}

    # -- what callers do ------------------------------------------------------------
    def request(self, method: str, params: Optional[Message] = None, *, timeout_ms: int,
                signal: Optional[AbortSignal] = None) -> Message:
        """Send a request and wait for its result; raise ``MCPError`` for anything else.

        A 2026-07-28 ``input_required`` result is answered here: each of its input
        requests goes to our handlers, and the request is sent again (a new id) with the
        ``inputResponses`` and the server's ``requestState`` as it was, until the result
        is complete; ``timeout_ms`` bounds all the rounds together."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        left = timeout_ms
        for _ in range(_MAX_ROUNDS):
            result = self._request_once(method, params, timeout_ms=left, signal=signal)
            if result.get("resultType") != "input_required":
                return result
            asked = result.get("inputRequests")
            if not isinstance(asked, dict):
                raise self._error("protocol", f"{method}: an input_required result without "
                                              "inputRequests")
            answers: Message = {}
            for key, wanted in asked.items():
                if not isinstance(wanted, dict) or not isinstance(wanted.get("method"), str):
                    raise self._error("protocol", f"{method}: input request {key!r} names no "
                                                  "method")
                inner = wanted.get("params")
                answers[key] = self.answer(wanted["method"],
                                           inner if isinstance(inner, dict) else {})
            params = {k: v for k, v in (params or {}).items()
                      if k not in ("inputResponses", "requestState")}
            params["inputResponses"] = answers
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            left = max(1, int((deadline - time.monotonic()) * 1000))
        raise self._error("protocol", f"{method} still asked for input after {_MAX_ROUNDS} "
                                      "rounds")

    def _request_once(self, method: str, params: Optional[Message], *, timeout_ms: int,
                      signal: Optional[AbortSignal]) -> Message:
        call = _Call(method)
        with self._lock:
            if self._failure is not None:
                raise self._error(*self._failure)
            self._next_id += 1
            request_id = self._next_id
            self._pending[request_id] = call
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if self.meta is not None:
            params = dict(params or {})
            params["_meta"] = {**self.meta, **(params.get("_meta") or {})}
        if params is not None:
            message["params"] = params
        failed: Optional[MCPError] = None
        sent = False
        try:
            if signal is None or not signal.aborted:
                self._send(message)
                sent = True
                self._wait(call, timeout_ms / 1000.0, signal)
        except MCPError as exc:  # the transport could not send it
            failed = exc
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
                outcome = call.outcome if call.outcome is not None else failed
        if isinstance(outcome, MCPError):
            raise outcome
        if outcome is not None:
            return outcome
        return self._give_up(request_id, method, timeout_ms, signal, sent)

    def notify(self, method: str, params: Optional[Message] = None) -> None:
        """Send a notification (no reply); raises ``MCPError`` if the transport is gone."""
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def fail(self, kind: str, message: str) -> None:
        """The transport is gone: every waiter, and every later request, gets this error."""
        with self._lock:
            if self._failure is None:
                self._failure = (kind, message)
            calls, self._pending = list(self._pending.values()), {}
            for call in calls:
                if call.outcome is None:
                    call.outcome = self._error(kind, message)
        for call in calls:
            call.event.set()

    def fail_request(self, request_id: Any, error: MCPError) -> None:
        """One request failed in the transport (an HTTP error status, a lost connection)."""
        self._resolve(request_id, error)

    @property
    def failure(self) -> Optional[MCPError]:
        """The error every request now gets, or None while the session works."""
        with self._lock:
            return None if self._failure is None else self._error(*self._failure)

    # -- what the transport delivers --------------------------------------------------
    def receive_data(self, data: bytes) -> Any:
        """Handle one message as received (JSON text); return the id it answers, if it is
        a reply. A message nested deeper than ``MAX_DEPTH`` (too deep to parse, even) fails
        the request it answers with a ``protocol`` error; other requests go on."""
        try:
            message = json.loads(data)
            deep = too_deep(message)
        except RecursionError:
            message, deep = None, True
        except ValueError:
            self.noise(data[:200].decode("utf-8", "replace"))
            return None
        if deep:
            request_id = top_level_id(data)
            self._resolve(self._own_id(request_id), self._error(
                "protocol", f"the reply to request {request_id!r} nests deeper than "
                            f"{MAX_DEPTH} levels"))
            if request_id is None:
                self.noise(data[:200].decode("utf-8", "replace"))
            return request_id
        self.receive(message)
        if isinstance(message, dict) and ("result" in message or "error" in message):
            return message.get("id")
        return None

    @staticmethod
    def _own_id(request_id: Any) -> Any:
        if isinstance(request_id, str) and request_id.isdigit():
            return int(request_id)  # a server that echoes ids as strings
        return request_id

    def receive(self, message: Any) -> None:
        """Handle one decoded message (or a batch) from the server."""
        if isinstance(message, list) and message:
            for item in message:
                self.receive(item)
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.noise(json.dumps(message, ensure_ascii=False)[:200])
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                self._answer(message["id"], method, message.get("params"))
            else:
                self._notification(method, message.get("params"))
        elif "id" in message and ("result" in message or "error" in message):
            self._reply(message)
        else:
            self.noise(json.dumps(message, ensure_ascii=False)[:200])

    def noise(self, sample: str) -> None:
        """The server wrote something that is not JSON-RPC; kept for later error messages."""
        with self._lock:
            count = self._noise[0] + 1
            self._noise = (count, sample[:200])
        level = logging.WARNING if count <= _NOISE_WARNINGS else logging.DEBUG
        logger.log(level, "MCP server %r wrote something that is not JSON-RPC: %r",
                   self.server, sample[:200])

    def noise_note(self) -> str:
        """``"; it also wrote ... "`` when the server wrote non-JSON-RPC output, else ``""``."""
        with self._lock:
            count, sample = self._noise
        if not count:
            return ""
        return f"; it also wrote {count} line(s) that are not JSON-RPC, the last: {sample!r}"

    @property
    def secrets(self) -> List[str]:
        """Redacted from every error and tool result, the longest first."""
        if self._more_secrets is None:
            return self._secrets
        return sorted({*self._secrets, *self._more_secrets()}, key=len, reverse=True)

    # -- internals -----------------------------------------------------------------------
    def _error(self, kind: str, message: str, **extra: Any) -> MCPError:
        return MCPError(self.server, kind, redact(message, self.secrets), **extra)

    @staticmethod
    def _wait(call: _Call, timeout_s: float, signal: Optional[AbortSignal]) -> None:
        if signal is None:
            call.event.wait(timeout_s)
        elif needs_polling(signal):
            deadline = time.monotonic() + timeout_s
            while not signal.aborted:
                left = deadline - time.monotonic()
                if left <= 0 or call.event.wait(min(_POLL_S, left)):
                    return
        else:
            wake = call.event.set
            signal.add_callback(wake)  # called at once if it has already fired
            try:
                call.event.wait(timeout_s)
            finally:
                signal.remove_callback(wake)

    def _give_up(self, request_id: int, method: str, timeout_ms: int,
                 signal: Optional[AbortSignal], sent: bool) -> Message:
        if sent and self._abandon is not None:
            self._abandon(request_id)  # its connection, if it has one, ends now
        if sent and method != "initialize":  # the one request MCP says never to cancel
            reason = "cancelled by the client" if signal is not None and signal.aborted \
                else f"timed out after {timeout_ms} ms"
            try:
                self.notify("notifications/cancelled", {"requestId": request_id,
                                                        "reason": reason})
            except MCPError:
                pass
        if signal is not None and signal.aborted:
            raise self._error("cancelled", f"{method} was cancelled: {signal.reason}")
        raise self._error("timeout", f"no reply to {method} within {timeout_ms} ms"
                          + self.noise_note())

    def _resolve(self, request_id: Any, outcome: Outcome) -> None:
        with self._lock:
            call = self._pending.get(request_id)
            if call is None or call.outcome is not None:
                return
            call.outcome = outcome
        call.event.set()

    def _reply(self, message: Message) -> None:
        request_id = self._own_id(message["id"])
        with self._lock:
            call = self._pending.get(request_id)
        if call is None:
            logger.debug("MCP server %r: reply to %r, which no one waits for (late or unknown)",
                         self.server, request_id)
            return
        error = message.get("error")
        result = message.get("result")
        if error is not None:
            error = error if isinstance(error, dict) else {"message": str(error)}
            code = error.get("code")
            text = error.get("message") or "(no message)"
            self._resolve(request_id, self._error(
                "rpc", f"{call.method} failed: {text} (JSON-RPC error {code})",
                code=code if isinstance(code, int) else None, data=error.get("data")))
        elif not isinstance(result, dict):
            self._resolve(request_id, self._error(
                "protocol", f"the result of {call.method} is not a JSON object: {result!r:.200}"))
        else:
            self._resolve(request_id, result)

    def _answer(self, request_id: Any, method: str, params: Any) -> None:
        handler = self.handlers.get(method)
        if method == "ping" or handler is None:
            self._reply_to(request_id, method, None if method == "ping" else handler,
                           params)
            return
        # A handler may wait on a person (elicitation): never on the reader's thread.
        threading.Thread(target=self._reply_to, args=(request_id, method, handler, params),
                         daemon=True, name="lattice-mcp-answer").start()

    def _reply_to(self, request_id: Any, method: str,
                  handler: Optional[Callable[[Message], Message]], params: Any) -> None:
        reply: Message = {"jsonrpc": "2.0", "id": request_id}
        if method == "ping":
            reply["result"] = {}
        elif handler is None:
            reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        else:
            try:
                reply["result"] = handler(params if isinstance(params, dict) else {})
            except MCPError as exc:
                reply["error"] = {"code": exc.code if exc.code is not None else -32603,
                                  "message": str(exc)}
            except Exception as exc:  # the application's callback failed: say so, go on
                logger.warning("MCP server %r: answering %s failed: %s", self.server,
                               method, exc)
                reply["error"] = {"code": -32603, "message": f"the client failed to answer "
                                                            f"{method}"}
        try:
            self._send(reply)
        except MCPError:
            pass  # the transport is gone; its failure is reported to the waiters

    def answer(self, method: str, params: Message) -> Message:
        """What we would answer the server's request ``method`` with, for a 2026-07-28
        ``input_required`` result (raises ``MCPError`` when we cannot)."""
        handler = self.handlers.get(method)
        if method == "ping":
            return {}
        if handler is None:
            raise self._error("protocol", f"the server asked for {method}, which this "
                                          "client does not offer")
        return handler(params)

    def _notification(self, method: str, params: Any) -> None:
        listener = self.listeners.get(method)
        if listener is not None and isinstance(params, dict):
            try:
                listener(params)
            except Exception as exc:  # an application callback: log it, keep reading
                logger.warning("MCP server %r: the %s callback failed: %s", self.server,
                               method, exc)
        if method == "notifications/message" and isinstance(params, dict):
            level = _LEVELS.get(str(params.get("level")), logging.INFO)
            data = params.get("data")
            text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
            name = params.get("logger")
            logger.log(level, "MCP server %r%s: %s", self.server,
                       f" [{name}]" if isinstance(name, str) else "", text)
        elif listener is None:
            logger.debug("MCP server %r: notification %s", self.server, method)
