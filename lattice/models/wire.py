"""The Messages API's JSON shapes, without any I/O: request bodies, replies, error bodies.

``request_body`` builds what ``AnthropicClient`` posts; ``reply_from_message`` turns a
message object (streamed or not) into the assistant dict clients return;
``error_from_response`` maps an HTTP error to the lattice error class; ``message_events``
is the inverse of SSE parsing (the events the API would stream for a message), used by
``MockMessagesServer`` and by tests.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import (
    APIConnectionError,
    APIStatusError,
    BadRequestError,
    PromptTooLongError,
    error_class_for_type,
    is_prompt_too_long,
    status_error_class,
)
from .base import ModelRequest

__all__ = [
    "USAGE_FIELDS",
    "request_body",
    "reply_from_message",
    "message_from_json",
    "error_from_response",
    "error_from_body",
    "redact",
    "message_events",
]

USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)

def request_body(request: ModelRequest, *, stream: bool) -> Tuple[bytes, bool]:
    """The JSON body for ``request`` and whether it asks for a stream.

    ``system`` is left out when None, ``tools`` when empty; ``extra`` keys are sent as
    given and win over ours (including ``stream``).
    """
    if not request.model:
        raise ValueError("AnthropicClient needs ModelRequest.model (the model name)")
    body: Dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
    if request.system is not None:
        body["system"] = request.system
    body["messages"] = request.messages
    if request.tools:
        body["tools"] = request.tools
    if stream:
        body["stream"] = True
    body.update(request.extra)
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return data, body.get("stream") is True


def reply_from_message(message: Mapping[str, Any]) -> Dict[str, Any]:
    """Turn a Messages API message object into the assistant dict clients return."""
    usage = message.get("usage") or {}
    return {
        "role": "assistant",
        "content": list(message.get("content") or []),
        "stop_reason": message.get("stop_reason"),
        "usage": {key: _count(usage.get(key)) for key in USAGE_FIELDS},
        "model": message.get("model"),
        "provider_response_id": message.get("id"),
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def message_from_json(content: bytes) -> Dict[str, Any]:
    """The message object in a 2xx JSON body (an error body raises its error)."""
    try:
        message = json.loads(content)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        raise APIConnectionError(f"malformed JSON response: {content[:200]!r}")
    if message.get("type") == "error":
        raise error_from_body(message, "error response")
    return message


def error_from_body(
    body: Mapping[str, Any], fallback: str, request_id: Optional[str] = None
) -> APIStatusError:
    """The error an ``{"type": "error", "error": {"type", "message"}}`` body names (a 2xx
    body or a stream's ``error`` event); ``fallback`` (``{type}`` filled in) when it has no
    message."""
    error = body.get("error")
    error = error if isinstance(error, dict) else {}
    kind = error.get("type")
    message = str(error.get("message") or fallback.format(type=kind or "unknown"))
    cls = error_class_for_type(kind)
    if cls is BadRequestError and is_prompt_too_long(message, _code(error)):
        cls = PromptTooLongError
    return cls(message, request_id=request_id, body=body)


def _code(error: Any) -> Optional[str]:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def error_from_response(
    status: int, headers: Mapping[str, str], content: bytes, secrets: Sequence[str] = ()
) -> APIStatusError:
    """The error for an HTTP error response: message from ``error.message`` (else the
    text), ``request-id`` header (else the body's ``request_id``), the parsed body."""
    text = redact(content.decode("utf-8", "replace"), secrets)  # a server may echo the key
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    message = ""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        message = str(error["message"])
    message = message or text.strip()[:1000] or f"HTTP {status}"
    request_id = headers.get("request-id") or (
        body.get("request_id") if isinstance(body, dict) else None
    )
    cls = status_error_class(status)
    if status in (400, 413) and is_prompt_too_long(message, _code(error)):
        cls = PromptTooLongError
    return cls(message, status_code=status, request_id=request_id, body=body)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``<redacted>``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    return text


# -- the other direction: what the API streams for a message ------------------------------


def _pieces(text: str, size: int) -> List[str]:
    size = size or max(1, min(256, -(-len(text) // 3)))  # default: three, at most 256 chars
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def message_events(message: Mapping[str, Any], *, piece: int = 0) -> List[Dict[str, Any]]:
    """The SSE event dicts the Messages API would stream for ``message``.

    ``message_start`` (empty content, ``output_tokens`` 1), per block a
    ``content_block_start`` (a ``ping`` after the first), its deltas and a
    ``content_block_stop``, then ``message_delta`` with the stop reason and usage, and
    ``message_stop``. Text, thinking and tool input are cut into pieces of ``piece``
    characters (0: three pieces of at most 256); citations become ``citations_delta`` events; other
    block types are sent whole in their start event.
    """
    usage = dict(message.get("usage") or {})
    start = dict(message, content=[], stop_reason=None, stop_sequence=None,
                 usage=dict(usage, output_tokens=1))
    events: List[Dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message.get("content") or ()):
        kind = block.get("type")
        first: Dict[str, Any] = dict(block)
        deltas: List[Dict[str, Any]] = []
        if kind == "text":
            first = {"type": "text", "text": ""}
            for citation in block.get("citations") or ():
                deltas.append({"type": "citations_delta", "citation": citation})
            for text in _pieces(block.get("text", ""), piece):
                deltas.append({"type": "text_delta", "text": text})
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            first["input"] = {}
            deltas.append({"type": "input_json_delta", "partial_json": ""})
            for part in _pieces(json.dumps(block.get("input", {})), piece):
                deltas.append({"type": "input_json_delta", "partial_json": part})
        elif kind == "thinking":
            first.update(thinking="", signature="")
            for text in _pieces(block.get("thinking", ""), piece):
                deltas.append({"type": "thinking_delta", "thinking": text})
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        events.append({"type": "content_block_start", "index": index, "content_block": first})
        if index == 0:
            events.append({"type": "ping"})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append({
        "type": "message_delta",
        "delta": {"stop_reason": message.get("stop_reason"),
                  "stop_sequence": message.get("stop_sequence")},
        "usage": usage,
    })
    events.append({"type": "message_stop"})
    return events
