"""``MCPServerHTTP``: an MCP server at a URL, over the Streamable HTTP transport
(``_http_transport.py``), optionally behind OAuth (``auth=lattice.mcp.OAuth(...)``).
``requests`` is imported when a server starts."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from ..models.body import DEFAULT_MAX_RESPONSE_BYTES
from ..models.urls import shown_url
from ._client import ElicitationRequest, Progress
from ._errors import MCPError
from ._server import MCPServerBase

__all__ = ["MCPServerHTTP"]


def _headers(value: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        # The values may be secrets: the message names the option, not what was given.
        raise ValueError("headers must be a dict of str to str")
    return dict(value)


class MCPServerHTTP(MCPServerBase):
    """An MCP server at a URL, over the Streamable HTTP transport.

    Args:
        url: The server's MCP endpoint, e.g. ``"http://127.0.0.1:8000/mcp"``. A password
            or query values in it are never shown.
        headers: Sent with every request (e.g. ``Authorization``); never shown in a repr,
            log, error or tool result.
        name: Used in error messages and logs; default: the name the server gives.
        timeout_ms: Bound on ``start()`` (the handshake) and on each request.
        tool_prefix: Put before each tool's name.
        allowed_tools: Only these tools (the server's own names); None: all.
        max_response_bytes: The most one response body, SSE line or event (one message)
            may hold; beyond it that call fails with ``MCPError`` kind ``"protocol"``.
        auth: A ``lattice.mcp.OAuth``: a 401 is answered by getting a token (discovery,
            registration, the user's consent or client credentials), then sent again.
        protocol_version: None (default): ask ``server/discover`` (2026-07-28) and fall
            back to the ``initialize`` handshake for a legacy server; or one version.
        on_elicitation, roots, on_progress, resources_as_tools: as for every server
            (``MCPServerBase``).
    """

    def __init__(self, url: str, *, headers: Optional[Mapping[str, str]] = None,
                 name: Optional[str] = None, timeout_ms: int = 60000, tool_prefix: str = "",
                 allowed_tools: Optional[Iterable[str]] = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, auth: Any = None,
                 protocol_version: Optional[str] = None,
                 on_elicitation: Optional[Callable[[ElicitationRequest], Any]] = None,
                 roots: Optional[List[Dict[str, Any]]] = None,
                 on_progress: Optional[Callable[[Progress], Any]] = None,
                 resources_as_tools: bool = False) -> None:
        from ..models.client import check_max_bytes

        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") \
                or not urlsplit(url).hostname:
            shown = shown_url(url) if isinstance(url, str) else url
            raise ValueError(f"url must be an http:// or https:// URL, got {shown!r}")
        self.url = url
        self._headers = _headers(headers)
        self.max_response_bytes = check_max_bytes(max_response_bytes)
        if auth is not None and not (hasattr(auth, "authorization")
                                     and hasattr(auth, "challenge")):
            raise ValueError(f"auth must be a lattice.mcp.OAuth or None, got {auth!r:.100}")
        self.auth = auth
        super().__init__(name=name, timeout_ms=timeout_ms, tool_prefix=tool_prefix,
                         allowed_tools=allowed_tools, protocol_version=protocol_version,
                         on_elicitation=on_elicitation, roots=roots,
                         on_progress=on_progress, resources_as_tools=resources_as_tools)

    @property
    def headers(self) -> Tuple[str, ...]:
        """The names of the extra headers sent (their values stay private)."""
        return tuple(self._headers)

    def _default_name(self) -> str:
        parts = urlsplit(self.url)  # no credentials, no query: a name is shown everywhere
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}"

    def _prepare(self) -> None:
        try:
            from ..models.http import transport_errors

            transport_errors()  # imports requests and urllib3
        except ImportError as exc:  # pragma: no cover - requests is a dependency
            raise MCPError(self.name, "start", "MCPServerHTTP needs the requests package"
                           ) from exc

    def _open(self, timeout_ms: int) -> Any:
        from ._http_transport import HTTPTransport

        return HTTPTransport(self.name, self.url, self._headers, timeout_ms,
                              self.max_response_bytes, self.auth)

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<MCPServerHTTP {self.name!r} url={self._default_name()!r} {state}>"
