"""What the client offers a server: elicitation, roots, progress, as JSON-RPC handlers.

``MCPServer*(..., on_elicitation=, roots=, on_progress=)`` become handlers on the session
(``elicitation/create``, ``roots/list``) and listeners (``notifications/progress``), and the
capabilities we declare. The same handlers answer a 2026-07-28 ``input_required`` result,
so an application writes one callback for both wires.
"""

from __future__ import annotations

import logging
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..errors import LatticeError
from ._errors import MCPError
from ._rpc import Message, RPCSession

__all__ = ["ElicitationRequest", "ElicitationPending", "Progress", "Features",
           "check_roots", "Asking", "check_answers", "WAITING_INPUT"]

logger = logging.getLogger("lattice.mcp")

_ACTIONS = ("accept", "decline", "cancel")

WAITING_INPUT = "(waiting for the user's input)"  # a paused call's result: never stored


class ElicitationRequest:
    """A server's question for the user (``elicitation/create``).

    ``.mode`` is ``"form"`` (answer ``{"action": "accept", "content": {...}}`` matching
    ``.requested_schema``) or ``"url"`` (send the user to ``.url``; answer
    ``{"action": "accept"}`` once they went). ``.id`` names it in a resumed query."""

    def __init__(self, server: str, params: Message) -> None:
        self.server = server
        self.mode = "url" if params.get("mode") == "url" else "form"
        self.message = str(params.get("message") or "")
        schema = params.get("requestedSchema")
        self.requested_schema: Optional[Dict[str, Any]] = \
            schema if isinstance(schema, dict) else None
        url = params.get("url")
        self.url: Optional[str] = url if isinstance(url, str) else None
        given = params.get("elicitationId")
        self.id = given if isinstance(given, str) and given else uuid.uuid4().hex
        self.params = params

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ElicitationRequest:
        """A stored request (``to_dict``'s form) again, as a paused query's history keeps it."""
        params: Dict[str, Any] = {"mode": data.get("mode"), "message": data.get("message"),
                                  "elicitationId": data.get("id")}
        if data.get("requested_schema") is not None:
            params["requestedSchema"] = data["requested_schema"]
        if data.get("url") is not None:
            params["url"] = data["url"]
        return cls(str(data.get("server") or ""), params)

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.id, "server": self.server, "mode": self.mode,
                "message": self.message, "requested_schema": self.requested_schema,
                "url": self.url}

    def __repr__(self) -> str:
        return f"<ElicitationRequest {self.id!r} {self.mode} from {self.server!r}>"


class ElicitationPending(LatticeError):
    """Raised by an ``on_elicitation`` callable that cannot answer now (the user answers
    later, maybe in another process): the query ends as ``awaiting_input``."""

    def __init__(self, request: Optional[ElicitationRequest] = None) -> None:
        super().__init__("the MCP server's question waits for the user")
        self.request = request


class Progress:
    """One ``notifications/progress``: ``.token``, ``.progress``, ``.total``, ``.message``."""

    def __init__(self, server: str, params: Message) -> None:
        self.server = server
        self.token = params.get("progressToken")
        self.progress = params.get("progress")
        self.total = params.get("total")
        self.message = params.get("message")

    def __repr__(self) -> str:
        return f"<Progress {self.token!r} {self.progress}/{self.total} {self.message!r}>"


def check_roots(value: Any) -> Optional[List[Dict[str, Any]]]:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(
            isinstance(r, dict) and isinstance(r.get("uri"), str) for r in value):
        raise ValueError(f"roots must be a list of dicts with a 'uri' (and a 'name'), got "
                         f"{value!r:.200}")
    return [dict(r) for r in value]


def _fits(content: Any, schema: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why ``content`` does not answer the form ``schema`` (flat objects of primitives,
    as elicitation allows), or None."""
    if not isinstance(content, dict):
        return "content must be an object"
    if not schema:
        return None
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in content:
            return f"the required field {name!r} is missing"
    kinds: Dict[str, Any] = {"string": str, "boolean": bool, "integer": int,
                             "number": (int, float)}
    for name, value in content.items():
        spec = properties.get(name)
        if not isinstance(spec, dict):
            continue
        kind = kinds.get(str(spec.get("type")))
        wrong_bool = isinstance(value, bool) and spec.get("type") in ("integer", "number")
        if kind is not None and (not isinstance(value, kind) or wrong_bool):
            return f"field {name!r} must be of type {spec.get('type')}"
        if "enum" in spec and value not in spec["enum"]:
            return f"field {name!r} must be one of {spec['enum']}"
    return None


def _checked(server: str, request: ElicitationRequest, answer: Any) -> Message:
    """The ``elicitation/create`` result for ``answer`` (MCPError when it is not one)."""
    if not isinstance(answer, dict) or answer.get("action") not in _ACTIONS:
        raise MCPError(server, "protocol",
                       "on_elicitation must return a dict whose 'action' is one of "
                       f"{', '.join(_ACTIONS)}")
    if answer["action"] != "accept" or request.mode == "url":
        return {"action": answer["action"]}
    why = _fits(answer.get("content", {}), request.requested_schema)
    if why is not None:
        raise MCPError(server, "protocol",
                       f"on_elicitation's answer does not match the requested schema: "
                       f"{why}", code=-32602)
    return {"action": "accept", "content": answer.get("content", {})}


def check_answers(pending: List[ElicitationRequest], answers: Mapping[str, Any]) -> None:
    """``elicitation=`` must answer exactly the ``pending`` requests' ids, each with an
    answer dict (``action``; for an accepted form, ``content`` matching its schema):
    ValueError naming the id and what is wrong."""
    if not pending:
        raise ValueError("elicitation= given, but no MCP server's question is waiting")
    ids = [r.id for r in pending]
    missing = [i for i in ids if i not in answers]
    unknown = [i for i in answers if i not in ids]
    if missing or unknown:
        raise ValueError(f"elicitation must answer exactly the pending requests: missing "
                         f"{missing}, unknown {unknown}")
    for request in pending:
        answer = answers[request.id]
        if not isinstance(answer, dict) or answer.get("action") not in _ACTIONS:
            raise ValueError(f"elicitation[{request.id!r}] must be a dict whose 'action' is "
                             f"one of {', '.join(_ACTIONS)}, got {answer!r:.200}")
        if answer["action"] == "accept" and request.mode == "form":
            why = _fits(answer.get("content", {}), request.requested_schema)
            if why is not None:
                raise ValueError(f"elicitation[{request.id!r}] does not match the requested "
                                 f"schema: {why}")


class Asking:
    """One ``tools/call`` in flight: the questions left for later (``pending``), and the
    answers a resumed query brought for the questions it left (``answers``: ``(stored
    request, answer)`` pairs, each used once, for a question of the same mode and message:
    a server asks again when its call is made again, usually under a new id)."""

    def __init__(self, answers: Sequence[Tuple[ElicitationRequest, Dict[str, Any]]]) -> None:
        self.pending: List[ElicitationRequest] = []
        self.answers = list(answers)

    def take(self, request: ElicitationRequest) -> Optional[Dict[str, Any]]:
        for i, (asked, answer) in enumerate(self.answers):
            if asked.mode == request.mode and asked.message == request.message:
                del self.answers[i]
                return answer
        return None


class Features:
    """The client side of one server: which handlers it installs, what it declares."""

    def __init__(self, server: Callable[[], str],
                 on_elicitation: Optional[Callable[[ElicitationRequest], Any]],
                 roots: Optional[List[Dict[str, Any]]],
                 on_progress: Optional[Callable[[Progress], Any]]) -> None:
        if on_elicitation is not None and not callable(on_elicitation):
            raise ValueError(f"on_elicitation must be a callable, got {on_elicitation!r}")
        if on_progress is not None and not callable(on_progress):
            raise ValueError(f"on_progress must be a callable, got {on_progress!r}")
        self._server = server
        self.on_elicitation = on_elicitation
        self.roots = roots
        self.on_progress = on_progress
        # The tool calls in flight (a question is theirs: JSON-RPC does not say which call
        # a server's request belongs to, so with several calls in flight each sees it).
        self._asking: List[Asking] = []
        self._asking_lock = threading.Lock()

    @contextmanager
    def asking(self, answers: Sequence[Tuple[ElicitationRequest, Dict[str, Any]]] = ()
               ) -> Iterator[Asking]:
        """Around one ``tools/call``: what its server asked that waits for the user."""
        asking = Asking(answers)
        with self._asking_lock:
            self._asking.append(asking)
        try:
            yield asking
        finally:
            with self._asking_lock:
                self._asking.remove(asking)

    def capabilities(self) -> Message:
        caps: Message = {}
        if self.on_elicitation is not None:
            caps["elicitation"] = {"form": {}, "url": {}}
        if self.roots is not None:
            caps["roots"] = {"listChanged": False}
        return caps

    def install(self, session: RPCSession) -> None:
        session.handlers["elicitation/create"] = self.elicit
        if self.roots is not None:
            roots = self.roots
            session.handlers["roots/list"] = lambda params: {"roots": roots}
        session.listeners["notifications/progress"] = self._progress

    def elicit(self, params: Message) -> Message:
        request = ElicitationRequest(self._server(), params)
        with self._asking_lock:
            asking = list(self._asking)
        for call in asking:  # a resumed query brought the answer (elicitation=)
            given = call.take(request)
            if given is not None:
                return _checked(self._server(), request, given)
        if self.on_elicitation is None:
            # Politely: the server hears "no" and goes on, instead of "no such method".
            return {"action": "decline"}
        try:
            answer = self.on_elicitation(request)
        except ElicitationPending as exc:
            # The user answers later: the call in flight ends the query as awaiting_input
            # (its result is discarded, it is made again with the answer). The server hears
            # "cancel" meanwhile, so the call finishes now.
            waiting = exc.request if exc.request is not None else request
            for call in asking:
                call.pending.append(waiting)
            if not asking:
                logger.warning("MCP server %r asked for input outside a tool call; "
                               "on_elicitation raised ElicitationPending: answered cancel",
                               self._server())
            return {"action": "cancel"}
        return _checked(self._server(), request, answer)

    def _progress(self, params: Message) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(self._server(), params))
