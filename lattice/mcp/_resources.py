"""Resources, templates, prompts and logging of a server (``MCPServerBase`` mixes these in).

Resource contents become content blocks (text, images and PDFs as the Messages API takes
them, other binary data as a line saying what it was); a prompt's messages become history
dicts, ready for ``agent.prompt(...)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..tools.definition import Tool, ToolContext, ToolResult
from ._content import IMAGE_TYPES
from ._errors import MCPError
from ._rpc import RPCSession

__all__ = ["ResourcesMixin", "LOG_LEVELS"]

Block = Dict[str, Any]
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_MAX_PAGES = 1000


def content_block(item: Dict[str, Any]) -> Block:
    """One resource content (``text`` or ``blob``) as a content block."""
    mime = str(item.get("mimeType") or "")
    if isinstance(item.get("text"), str):
        return {"type": "text", "text": item["text"]}
    blob = item.get("blob")
    if isinstance(blob, str) and mime in IMAGE_TYPES:
        return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": blob}}
    if isinstance(blob, str) and mime == "application/pdf":
        return {"type": "document", "source": {"type": "base64", "media_type": mime,
                                               "data": blob}}
    size = len(blob) * 3 // 4 if isinstance(blob, str) else 0
    return {"type": "text", "text": f"[binary resource {item.get('uri', '')} "
                                    f"({mime or 'unknown type'}, {size} bytes)]"}


def _message_blocks(content: Any) -> List[Block]:
    items = content if isinstance(content, list) else [content]
    blocks: List[Block] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": str(item.get("text", ""))})
        elif kind == "image" and item.get("mimeType") in IMAGE_TYPES:
            blocks.append({"type": "image", "source": {
                "type": "base64", "media_type": item["mimeType"], "data": item.get("data", "")}})
        elif kind == "resource" and isinstance(item.get("resource"), dict):
            blocks.append(content_block(item["resource"]))
        else:
            blocks.append({"type": "text", "text": f"[{kind} content]"})
    return blocks


class ResourcesMixin:
    """``resources()``, ``resource_templates()``, ``read_resource()``, ``prompts()``,
    ``get_prompt()``, ``set_logging_level()``."""

    name: str
    timeout_ms: int

    def _session(self) -> RPCSession:
        raise NotImplementedError

    def _pages(self, method: str, key: str) -> List[Dict[str, Any]]:
        session = self._session()
        found: List[Dict[str, Any]] = []
        cursor: Any = None
        for _ in range(_MAX_PAGES):
            result = session.request(method, None if cursor is None else {"cursor": cursor},
                                     timeout_ms=self.timeout_ms)
            page = result.get(key)
            if not isinstance(page, list):
                raise MCPError(self.name, "protocol", f"{method} sent no {key} list")
            found.extend(item for item in page if isinstance(item, dict))
            cursor = result.get("nextCursor")
            if cursor is None or cursor == "":
                return found
        raise MCPError(self.name, "protocol", f"{method} sent more than {_MAX_PAGES} pages")

    def resources(self) -> List[Dict[str, Any]]:
        """The server's resources as it lists them (``uri``, ``name``, ``mimeType``...)."""
        return self._pages("resources/list", "resources")

    def resource_templates(self) -> List[Dict[str, Any]]:
        """The server's resource templates (``uriTemplate``, ``name``...)."""
        return self._pages("resources/templates/list", "resourceTemplates")

    def read_resource(self, uri: str) -> List[Block]:
        """The resource at ``uri`` as content blocks (one per content it sends)."""
        if not isinstance(uri, str) or not uri:
            raise ValueError(f"uri must be a non-empty str, got {uri!r}")
        result = self._session().request("resources/read", {"uri": uri},
                                         timeout_ms=self.timeout_ms)
        contents = result.get("contents")
        if not isinstance(contents, list):
            raise MCPError(self.name, "protocol", "resources/read sent no contents list")
        return [content_block(c) for c in contents if isinstance(c, dict)]

    def prompts(self) -> List[Dict[str, Any]]:
        """The server's prompts (``name``, ``description``, ``arguments``)."""
        return self._pages("prompts/list", "prompts")

    def get_prompt(self, name: str, arguments: Optional[Dict[str, str]] = None
                   ) -> List[Dict[str, Any]]:
        """The prompt's messages as history dicts (``role``, ``content`` blocks); the last
        is the user message to send (``agent.prompt(messages[-1]["content"])``)."""
        if arguments is not None and not (isinstance(arguments, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in arguments.items())):
            raise ValueError("arguments must be a dict of str to str")
        params: Dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = arguments
        result = self._session().request("prompts/get", params, timeout_ms=self.timeout_ms)
        messages = result.get("messages")
        if not isinstance(messages, list):
            raise MCPError(self.name, "protocol", "prompts/get sent no messages list")
        return [{"role": "assistant" if m.get("role") == "assistant" else "user",
                 "content": _message_blocks(m.get("content"))}
                for m in messages if isinstance(m, dict)]

    def set_logging_level(self, level: str) -> None:
        """Ask the server to send ``notifications/message`` at ``level`` and above (they go
        to the ``lattice.mcp`` logger)."""
        if level not in LOG_LEVELS:
            raise ValueError(f"level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
        self._session().request("logging/setLevel", {"level": level},
                                timeout_ms=self.timeout_ms)

    def _resource_tool(self) -> Tool:
        """The ``read_resource`` tool ``resources_as_tools=True`` adds for the model."""

        def handler(args: Dict[str, Any], context: ToolContext) -> ToolResult:
            try:
                return ToolResult(self.read_resource(str(args.get("uri", ""))))
            except (MCPError, ValueError) as exc:
                return ToolResult(str(exc), is_error=True)

        listed = ", ".join(str(r.get("uri")) for r in self.resources()[:50])
        return Tool("read_resource", f"Read a resource of the MCP server {self.name!r} by its "
                                     f"URI. Some: {listed}" if listed else
                    f"Read a resource of the MCP server {self.name!r} by its URI.",
                    {"type": "object", "properties": {"uri": {"type": "string"}},
                     "required": ["uri"]}, handler)
