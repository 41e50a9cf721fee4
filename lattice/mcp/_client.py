"""What the client offers a server: elicitation, roots, progress, as JSON-RPC handlers.

``MCPServer*(..., on_elicitation=, roots=, on_progress=)`` become handlers on the session
(``elicitation/create``, ``roots/list``) and listeners (``notifications/progress``), and the
capabilities we declare. The same handlers answer a 2026-07-28 ``input_required`` result,
so an application writes one callback for both wires.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..errors import LatticeError
from ._errors import MCPError
from ._rpc import Message, RPCSession

__all__ = ["ElicitationRequest", "ElicitationPending", "Progress", "Features",
           "check_roots"]

logger = logging.getLogger("lattice.mcp")

_ACTIONS = ("accept", "decline", "cancel")


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
        if self.on_elicitation is None:
            # Politely: the server hears "no" and goes on, instead of "no such method".
            return {"action": "decline"}
        try:
            answer = self.on_elicitation(request)
        except ElicitationPending:
            # The awaiting_input ending (the query ends, another process answers) is not
            # built yet: the server hears "cancel" and the call goes on without the input.
            logger.warning("MCP server %r: on_elicitation raised ElicitationPending; ending a "
                           "query as awaiting_input is not supported yet: answered cancel",
                           self._server())
            return {"action": "cancel"}
        if not isinstance(answer, dict) or answer.get("action") not in _ACTIONS:
            raise MCPError(self._server(), "protocol",
                           "on_elicitation must return a dict whose 'action' is one of "
                           f"{', '.join(_ACTIONS)}")
        if answer["action"] != "accept" or request.mode == "url":
            return {"action": answer["action"]}
        why = _fits(answer.get("content", {}), request.requested_schema)
        if why is not None:
            raise MCPError(self._server(), "protocol",
                           f"on_elicitation's answer does not match the requested schema: "
                           f"{why}", code=-32602)
        return {"action": "accept", "content": answer.get("content", {})}

    def _progress(self, params: Message) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(self._server(), params))
