"""What both server kinds share: options, start/handshake/close, ``tools()`` and calls.

A subclass says how to open a transport (``_open``); everything else is here. The server
object is the only thing that knows about ``Tool``s: the transport and the JSON-RPC session
know nothing of the loop, and hold no reference back to the server, so a server dropped
without ``close()`` is still closed (by its finalizer, at the latest at interpreter exit).

Threads: ``start``/``close`` take ``_lock`` (one lifecycle change at a time); calls only
read ``_transport`` once, so a call racing ``close()`` gets a "closed" error, never a hang.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
import weakref
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional

from .._version import __version__
from ..cancellation import SignalLike, as_signal
from ..errors import SchemaError
from ..models.urls import redact
from ..tools.definition import Tool, ToolContext, ToolResult
from ._client import WAITING_INPUT, ElicitationRequest, Features, Progress, check_roots
from ._content import to_tool_result
from ._errors import MCPError
from ._resources import ResourcesMixin
from ._rpc import RPCSession, logger

__all__ = ["MCPServerBase", "Transport", "PROTOCOL_VERSIONS", "MODERN_VERSIONS"]

# Newest first: the first is what we offer; any of them is accepted in the answer. The
# modern ones carry their version on every request (no handshake); the legacy ones begin
# with ``initialize``.
PROTOCOL_VERSIONS = ("2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_VERSIONS = ("2026-07-28",)
LEGACY_VERSIONS = tuple(v for v in PROTOCOL_VERSIONS if v not in MODERN_VERSIONS)
_UNSUPPORTED_VERSION = (-32022, -32004)  # the codes a modern server refuses a version with
_CLIENT_INFO = {"name": "lattice", "version": __version__}
_MAX_PAGES = 1000  # a server whose cursors never end is broken, not large
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


class Transport:
    """A started connection: its JSON-RPC ``session``, and how to end it."""

    session: RPCSession
    header_params: Dict[str, Dict[str, str]] = {}  # tool -> {argument: Mcp-Param-* name}

    def negotiated(self, version: str) -> None:
        """The handshake agreed on ``version`` (HTTP sends it on every later request)."""

    def probes_first(self) -> bool:
        """Whether, not told a version, we ask ``server/discover`` before ``initialize``
        (HTTP: a legacy server's error status says "legacy" at once; stdio: a legacy
        server may never answer an unknown method before ``initialize``)."""
        return False

    def renew_with(self, handshake: Any) -> None:
        """How to begin a new session when the server forgot ours (HTTP 404)."""

    def ready(self) -> None:
        """The handshake is over (HTTP opens its GET stream for the server's messages)."""

    def close(self) -> None:
        """End the connection and everything it started; safe to call twice."""
        raise NotImplementedError


def _redacted(result: ToolResult, secrets: List[str]) -> ToolResult:
    """``result`` with the server's secrets (header values it echoed) out of its text."""
    if not secrets:
        return result
    if isinstance(result.content, str):
        result.content = redact(result.content, secrets)
    else:
        result.content = [dict(b, text=redact(b["text"], secrets))
                          if b.get("type") == "text" and isinstance(b.get("text"), str) else b
                          for b in result.content]
    return result


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110)


def _header_params(tool: Dict[str, Any]) -> Optional[Dict[str, str]]:
    """The tool's arguments mirrored into ``Mcp-Param-*`` headers (2026-07-28): argument
    -> header name; None when an annotation is invalid (the tool must then be left out):
    empty, not a header token, on a non-primitive or number property, or twice."""
    schema = tool.get("inputSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    found: Dict[str, str] = {}
    seen = set()
    for name, spec in (properties or {}).items() if isinstance(properties, dict) else ():
        if not isinstance(spec, dict) or "x-mcp-header" not in spec:
            continue
        header = spec["x-mcp-header"]
        if not isinstance(header, str) or not _TOKEN.match(header) \
                or spec.get("type") not in ("string", "integer", "boolean") \
                or header.lower() in seen:
            return None
        seen.add(header.lower())
        found[name] = header
    return found


def _positive_ms(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"timeout_ms must be a positive int (milliseconds), got {value!r}")
    return value


def _names(value: Any) -> Optional[FrozenSet[str]]:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(f"allowed_tools must be None or a list of tool names, got {value!r}")
    names = list(value)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"allowed_tools must hold tool names (str), got {value!r}")
    return frozenset(names)


class MCPServerBase(ResourcesMixin):
    """One MCP server; see ``MCPServerStdio`` and ``MCPServerHTTP``.

    Options every server takes: ``protocol_version`` (None: the newest both speak),
    ``on_elicitation(request) -> answer`` (None: questions are declined), ``roots`` (what
    ``roots/list`` answers), ``on_progress(progress)``, ``resources_as_tools`` (a
    ``read_resource`` tool for the model)."""

    def __init__(self, *, name: Optional[str], timeout_ms: int, tool_prefix: str,
                 allowed_tools: Optional[Iterable[str]], protocol_version: Optional[str] = None,
                 on_elicitation: Optional[Callable[[ElicitationRequest], Any]] = None,
                 roots: Optional[List[Dict[str, Any]]] = None,
                 on_progress: Optional[Callable[[Progress], Any]] = None,
                 resources_as_tools: bool = False) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"name must be a non-empty str or None, got {name!r}")
        if not isinstance(tool_prefix, str):
            raise ValueError(f"tool_prefix must be a str, got {tool_prefix!r}")
        self.timeout_ms = _positive_ms(timeout_ms)
        self.tool_prefix = tool_prefix
        self.allowed_tools = _names(allowed_tools)
        if protocol_version is not None and protocol_version not in PROTOCOL_VERSIONS:
            raise ValueError(f"protocol_version must be None or one of "
                             f"{', '.join(PROTOCOL_VERSIONS)}, got {protocol_version!r}")
        if not isinstance(resources_as_tools, bool):
            raise ValueError(f"resources_as_tools must be a bool, got {resources_as_tools!r}")
        self.wanted_version = protocol_version
        self.resources_as_tools = resources_as_tools
        self._features = Features(lambda: self.name, on_elicitation, check_roots(roots),
                                  on_progress)
        self._header_params: Dict[str, Dict[str, str]] = {}  # tool -> {argument: header}
        self._given_name = name
        self.name = name or self._default_name()
        self.protocol_version: Optional[str] = None
        self.server_info: Dict[str, Any] = {}
        self.capabilities: Dict[str, Any] = {}
        self.instructions: Optional[str] = None
        self._lock = threading.Lock()
        self._transport: Optional[Transport] = None
        self._finalizer: Optional[weakref.finalize[Any, Any]] = None

    # -- what subclasses provide ------------------------------------------------------
    def _default_name(self) -> str:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Load what opening needs (a library import is no part of the server's time)."""

    def _open(self, timeout_ms: int) -> Transport:
        """Open the transport (spawn the process, make the HTTP session)."""
        raise NotImplementedError

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> MCPServerBase:
        """Start the server and run the handshake (bounded by ``timeout_ms``); no-op if
        already started. Raises ``MCPError`` if the server cannot be started."""
        with self._lock:
            if self._transport is not None:
                return self
            self._prepare()
            began = time.monotonic()
            transport = self._open(self.timeout_ms)
            transport.header_params = self._header_params
            try:
                left = self.timeout_ms - int((time.monotonic() - began) * 1000)
                self._handshake(transport, max(1, left))
            except BaseException:
                transport.close()
                raise
            self._transport = transport
            self._finalizer = weakref.finalize(self, transport.close)
        return self

    def close(self) -> None:
        """End the session and stop the server (stdio: close stdin, terminate, kill).

        Safe to call twice. Calls waiting on the server get an ``is_error`` result; the
        server may be started again with ``start()``.
        """
        with self._lock:
            finalizer, self._finalizer, self._transport = self._finalizer, None, None
        if finalizer is not None:
            finalizer()  # runs transport.close() exactly once

    def __enter__(self) -> MCPServerBase:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``close()`` while the server still answers."""
        transport = self._transport
        return transport is not None and transport.session.failure is None

    def _handshake(self, transport: Transport, timeout_ms: int) -> None:
        """Agree on a version: ``server/discover`` for the modern wire (each request then
        carries the version), ``initialize`` for a legacy one; not told which, HTTP probes
        with ``server/discover`` and falls back to ``initialize`` on any other answer than
        a modern server's (the rule for dual-era clients)."""
        self._features.install(transport.session)
        transport.renew_with(lambda left: self._initialize(transport, self.protocol_version
                                                           or LEGACY_VERSIONS[0], left))
        wanted = self.wanted_version
        began = time.monotonic()
        if wanted in MODERN_VERSIONS or (wanted is None and transport.probes_first()):
            try:
                if self._discover(transport, wanted or MODERN_VERSIONS[0], timeout_ms):
                    return
            except MCPError as exc:
                if wanted is not None or exc.kind in ("timeout", "cancelled", "closed", "auth"):
                    raise
                logger.debug("MCP server %r speaks no modern version (%s): initialize",
                             self.name, exc)
            transport.session.meta = None
        left = max(1, timeout_ms - int((time.monotonic() - began) * 1000))
        self._initialize(transport, wanted or LEGACY_VERSIONS[0], left)

    def _meta(self, version: str) -> Dict[str, Any]:
        return {"io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientInfo": dict(_CLIENT_INFO),
                "io.modelcontextprotocol/clientCapabilities": self._features.capabilities()}

    def _discover(self, transport: Transport, version: str, timeout_ms: int) -> bool:
        """True when a modern version was agreed on; False: the server is legacy only."""
        session = transport.session
        for _ in range(2):  # our version, then one the server names
            session.meta = self._meta(version)
            transport.negotiated(version)
            try:
                result = session.request("server/discover", {}, timeout_ms=timeout_ms)
            except MCPError as exc:
                supported = exc.data.get("supported") if isinstance(exc.data, dict) else None
                if exc.code not in _UNSUPPORTED_VERSION or not isinstance(supported, list):
                    raise
                ours = [v for v in PROTOCOL_VERSIONS if v in supported]
                if not ours:
                    raise MCPError(self.name, "version",
                                   f"the server speaks {supported!r}; lattice speaks "
                                   f"{', '.join(PROTOCOL_VERSIONS)}") from None
                if ours[0] not in MODERN_VERSIONS:
                    return False
                version = ours[0]
                continue
            listed = result.get("supportedVersions")
            if isinstance(listed, list) and version not in listed:
                ours = [v for v in MODERN_VERSIONS if v in listed]
                if not ours:
                    return False
                version = ours[0]
                continue
            given = result.get("_meta")
            meta: Dict[str, Any] = given if isinstance(given, dict) else {}
            info = result.get("serverInfo") or meta.get("io.modelcontextprotocol/serverInfo")
            self._agreed(transport, version, info, result)
            return True
        raise MCPError(self.name, "version", "the server refused every version lattice "
                                             "offered")

    def _initialize(self, transport: Transport, version: str, timeout_ms: int) -> None:
        result = transport.session.request("initialize", {
            "protocolVersion": version,
            "capabilities": self._features.capabilities(),
            "clientInfo": dict(_CLIENT_INFO),
        }, timeout_ms=timeout_ms)
        answered = result.get("protocolVersion")
        if answered not in PROTOCOL_VERSIONS:
            raise MCPError(self.name, "version",
                           f"the server answered protocol version {answered!r}; lattice "
                           f"speaks {', '.join(PROTOCOL_VERSIONS)}")
        self._agreed(transport, answered, result.get("serverInfo"), result)
        if answered in MODERN_VERSIONS:  # a dual-era server chose the modern wire
            transport.session.meta = self._meta(answered)
            return
        transport.session.notify("notifications/initialized")
        transport.ready()

    def _agreed(self, transport: Transport, version: str, info: Any,
                result: Dict[str, Any]) -> None:
        self.protocol_version = version
        self.server_info = dict(info) if isinstance(info, dict) else {}
        capabilities = result.get("capabilities")
        self.capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
        instructions = result.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else None
        if self._given_name is None and isinstance(self.server_info.get("name"), str):
            self.name = transport.session.server = self.server_info["name"]
        transport.negotiated(version)

    def _session(self) -> RPCSession:
        transport = self._transport
        if transport is None:
            raise MCPError(self.name, "closed",
                           "the server is not running (call start() or use `with server:`)")
        return transport.session

    # -- tools --------------------------------------------------------------------------
    def list_tools(self) -> List[Dict[str, Any]]:
        """The server's tool definitions as it sends them (every page of ``tools/list``)."""
        session = self._session()
        tools: List[Dict[str, Any]] = []
        cursor: Any = None
        for _ in range(_MAX_PAGES):
            result = session.request("tools/list", None if cursor is None else {"cursor": cursor},
                                     timeout_ms=self.timeout_ms)
            page = result.get("tools")
            if not isinstance(page, list):
                raise MCPError(self.name, "protocol",
                               f"tools/list sent no tools list: {result!r:.200}")
            for tool in page:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    headers = _header_params(tool)
                    if headers is None:
                        logger.warning("MCP server %r: tool %r is left out: its x-mcp-header "
                                       "annotations are invalid", self.name, tool["name"])
                        continue
                    self._header_params[tool["name"]] = headers
                    tools.append(tool)
            cursor = result.get("nextCursor")
            if cursor is None or cursor == "":
                return tools
        raise MCPError(self.name, "protocol", f"tools/list sent more than {_MAX_PAGES} pages")

    def tools(self) -> List[Tool]:
        """The server's tools as ``Tool`` objects (starts the server if needed).

        Named ``tool_prefix + name``, filtered by ``allowed_tools`` (the server's names),
        each calling the server with the query's signal.
        """
        self.start()
        listed = self.list_tools()
        if self.allowed_tools is not None:
            missing = self.allowed_tools - {t["name"] for t in listed}
            if missing:
                logger.warning("MCP server %r has no tools named %s", self.name, sorted(missing))
            listed = [t for t in listed if t["name"] in self.allowed_tools]
        made = [self._make_tool(spec) for spec in listed]
        if self.resources_as_tools:
            reader = self._resource_tool()
            reader.name = reader.definition["name"] = _UNSAFE_NAME.sub(
                "_", self.tool_prefix + reader.name)[:128]
            made.append(reader)
        return made

    def lattice_tools(self) -> List[Tool]:
        """What ``Agent(tools=[server])`` and ``add_tools(server)`` use: ``tools()``."""
        return self.tools()

    def _make_tool(self, spec: Dict[str, Any]) -> Tool:
        server_name: str = spec["name"]
        name = _UNSAFE_NAME.sub("_", self.tool_prefix + server_name)[:128]
        description = spec.get("description") or spec.get("title") or ""
        schema = spec.get("inputSchema")
        schema = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}

        def handler(args: Dict[str, Any], context: ToolContext) -> ToolResult:
            call = context._call
            loop = getattr(call, "loop", None)  # the query running it (None: called directly)
            answers = loop.elicitation_answers.pop(context.tool_use_id, []) \
                if loop is not None else []
            try:
                with self._features.asking(answers) as asking:
                    result = self.call_tool(server_name, args, signal=context.signal)
            except MCPError as exc:
                return ToolResult(str(exc), is_error=True)
            if asking.pending:  # the user answers later: the query ends awaiting_input
                if loop is None:
                    return ToolResult(f"MCP server {self.name!r} asked for input the user "
                                      f"will give later: {asking.pending[0].message}",
                                      is_error=True)
                loop.elicited[context.tool_use_id] = asking.pending
                return ToolResult(WAITING_INPUT)
            return result

        # A server that says a call may be repeated safely: a durable run may run it again.
        annotations = spec.get("annotations")
        idempotent = isinstance(annotations, dict) and annotations.get("idempotentHint") is True
        try:
            return Tool(name, str(description), schema, handler, idempotent=idempotent)
        except (SchemaError, ValueError) as exc:
            # Our validator refused the server's schema: the server still validates its
            # input, so the model is shown the schema as given and we check nothing.
            logger.warning("MCP server %r: tool %r has a schema lattice cannot check (%s)",
                           self.name, server_name, exc)
            made = Tool(name, str(description), {"type": "object"}, handler,
                        idempotent=idempotent)
            made.input_schema = schema
            made.definition["input_schema"] = schema
            return made

    def call_tool(self, name: str, arguments: Optional[Dict[str, Any]] = None, *,
                  signal: Optional[SignalLike] = None,
                  timeout_ms: Optional[int] = None) -> ToolResult:
        """Call the server's tool ``name`` (its own name, without ``tool_prefix``).

        Returns the mapped ``ToolResult`` (``is_error`` when the server says so); raises
        ``MCPError`` for a JSON-RPC error, a timeout, a cancelled call or a dead server.
        """
        limit = self.timeout_ms if timeout_ms is None else _positive_ms(timeout_ms)
        session = self._session()
        params: Dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if self._features.on_progress is not None:  # the server reports progress to it
            params["_meta"] = {"progressToken": uuid.uuid4().hex}
        result = session.request("tools/call", params, timeout_ms=limit,
                                 signal=as_signal(signal))
        return _redacted(to_tool_result(result), session.secrets)

    def ping(self) -> None:
        """Send ``ping``; raises ``MCPError`` if the server does not answer in time."""
        self._session().request("ping", None, timeout_ms=self.timeout_ms)
