"""Streamable HTTP details that are not the transport's flow: the headers a POST carries
(2026-07-28: ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``), and the SSE events MCP sends,
with the ``id`` and ``retry`` fields resumption needs (the model clients' decoder drops
them, and must stay lean).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional

from ..models.body import DEFAULT_MAX_RESPONSE_BYTES, too_large

__all__ = ["Event", "MCPEvents", "method_headers", "error_reply"]

# The parameter each method is named by, in ``Mcp-Name``.
_NAMED_BY = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def header_value(value: Any) -> Optional[str]:
    """A JSON value as a header value: plain when it is safe printable ASCII, else
    ``=?base64?...?=`` (UTF-8); None for null (the header is left out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = json.dumps(value)
    else:
        text = str(value)
    if text != text.strip() or any(not 0x20 <= ord(c) <= 0x7E for c in text):
        return "=?base64?" + base64.b64encode(text.encode("utf-8")).decode("ascii") + "?="
    return text


def method_headers(message: Dict[str, Any],
                   header_params: Dict[str, Dict[str, str]]) -> Dict[str, str]:
    """The 2026-07-28 routing headers of a request or notification."""
    method = message.get("method")
    if not isinstance(method, str):
        return {}
    headers = {"Mcp-Method": method}
    given = message.get("params")
    params: Dict[str, Any] = given if isinstance(given, dict) else {}
    named = _NAMED_BY.get(method)
    if named is not None and isinstance(params.get(named), str):
        value = header_value(params[named])
        if value is not None:
            headers["Mcp-Name"] = value
    if method == "tools/call":
        passed = params.get("arguments")
        arguments: Dict[str, Any] = passed if isinstance(passed, dict) else {}
        for argument, name in header_params.get(str(params.get("name")), {}).items():
            value = header_value(arguments.get(argument))
            if value is not None:
                headers[f"Mcp-Param-{name}"] = value
    return headers


def error_reply(body: bytes) -> Optional[Dict[str, Any]]:
    """The JSON-RPC error reply an HTTP error status carries, if its body is one."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(message, dict) and isinstance(message.get("error"), dict):
        return message
    return None


class Event(NamedTuple):
    event: Optional[str]
    data: bytes
    id: Optional[str]


class MCPEvents:
    """SSE events of one stream, remembering the last event id and the server's retry."""

    def __init__(self) -> None:
        self.last_id: Optional[str] = None
        self.retry_ms: Optional[int] = None

    def events(self, lines: Iterable[bytes], limit: int = DEFAULT_MAX_RESPONSE_BYTES
               ) -> Iterator[Event]:
        data: List[bytes] = []
        name: Optional[str] = None
        size = 0
        for line in lines:
            if not line:
                if data:
                    yield Event(name, b"\n".join(data), self.last_id)
                data, name, size = [], None, 0
                continue
            if line[:1] == b":":
                continue
            field, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                size += len(value)
                if size > limit:
                    raise too_large("an SSE event", limit)
                data.append(value)
            elif field == b"event":
                name = value.decode("utf-8", "replace")
            elif field == b"id" and b"\0" not in value:
                self.last_id = value.decode("utf-8", "replace")
            elif field == b"retry" and value.isdigit():
                self.retry_ms = int(value)
        if data:
            yield Event(name, b"\n".join(data), self.last_id)
