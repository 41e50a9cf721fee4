"""MCP ``tools/call`` results → ``ToolResult``s the loop sends back as tool_result content.

Text stays text, images become image blocks (base64 source) when the Messages API takes
their type; everything the model cannot be shown (audio, links, binary resources) becomes a
line of text saying what it was, so the model knows something came back. One function per
content type, in a table, so a new type is one function and one line.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List

from ..tools.definition import ToolResult

__all__ = ["to_tool_result", "IMAGE_TYPES"]

Block = Dict[str, Any]

# The image types the Messages API accepts in an image block.
IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


def _size(data: Any) -> str:
    """A rough size for base64 ``data``, for the model's information."""
    if not isinstance(data, str):
        return "no data"
    size = len(data) * 3 // 4
    return f"{size} bytes" if size < 10_000 else f"{size // 1024} KiB"


def _from_text(item: Dict[str, Any]) -> Block:
    return _text(str(item.get("text", "")))


def _from_image(item: Dict[str, Any]) -> Block:
    mime = item.get("mimeType")
    data = item.get("data")
    if mime in IMAGE_TYPES and isinstance(data, str) and data:
        return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
    return _text(f"[image of type {mime or 'unknown'} ({_size(data)}), which cannot be shown]")


def _from_audio(item: Dict[str, Any]) -> Block:
    return _text(f"[audio of type {item.get('mimeType') or 'unknown'} "
                 f"({_size(item.get('data'))}), which cannot be played here]")


def _from_link(item: Dict[str, Any]) -> Block:
    parts = [f"[resource link: {item.get('name') or item.get('title') or 'unnamed'}",
             f"<{item.get('uri', '')}>"]
    if item.get("mimeType"):
        parts.append(f"({item['mimeType']})")
    if item.get("description"):
        parts.append(f"- {item['description']}")
    return _text(" ".join(parts) + "]")


def _from_resource(item: Dict[str, Any]) -> Block:
    given = item.get("resource")
    resource: Dict[str, Any] = given if isinstance(given, dict) else {}
    head = f"[embedded resource <{resource.get('uri', '')}>"
    if resource.get("mimeType"):
        head += f" ({resource['mimeType']})"
    if isinstance(resource.get("text"), str):
        return _text(f"{head}]\n{resource['text']}")
    return _text(f"{head}: binary, {_size(resource.get('blob'))}, not shown]")


_CONVERTERS: Dict[str, Callable[[Dict[str, Any]], Block]] = {
    "audio": _from_audio,
    "image": _from_image,
    "resource": _from_resource,
    "resource_link": _from_link,
    "text": _from_text,
}


def _block(item: Any) -> Block:
    if not isinstance(item, dict):
        return _text(f"[content that is not an object: {item!r:.200}]")
    convert = _CONVERTERS.get(str(item.get("type")))
    if convert is None:
        return _text(f"[content of unsupported type {item.get('type')!r}]")
    return convert(item)


def to_tool_result(result: Dict[str, Any]) -> ToolResult:
    """The ``ToolResult`` for a ``tools/call`` result object."""
    content = result.get("content")
    blocks: List[Block] = [_block(item) for item in content] if isinstance(content, list) else []
    structured = result.get("structuredContent")
    if not blocks and structured is not None:
        # Servers should also send structured results as text; for those that don't.
        blocks = [_text(json.dumps(structured, ensure_ascii=False))]
    is_error = result.get("isError") is True
    if not blocks:
        return ToolResult("", is_error=is_error)
    return ToolResult(blocks, is_error=is_error)
