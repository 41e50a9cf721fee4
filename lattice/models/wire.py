"""The Messages API's JSON shapes, without any I/O: request bodies, replies, error bodies.

``request_body`` builds what ``AnthropicClient`` posts; ``reply_from_message`` turns a
message object (streamed or not) into the assistant dict clients return;
``error_from_response`` (from ``status.py``, shared by every wire format) maps an HTTP error
to the lattice error class; ``message_events``
is the inverse of SSE parsing (the events the API would stream for a message), used by
``MockMessagesServer`` and by tests.
"""

from __future__ import annotations

import json
import operator
from itertools import repeat
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import (
    APIConnectionError,
    APIStatusError,
    BadRequestError,
    PromptTooLongError,
    error_class_for_type,
    is_prompt_too_long,
)
from ..messages import PROVIDER_KEYS
from ..usage import USAGE_FIELDS, token_count
from .base import ModelRequest
from .entries import MARK, EntryBytes, dump
from .shape import check_reply, no_content, optional
from .status import error_from_response, load_json, redact

__all__ = [
    "USAGE_FIELDS",
    "request_body",
    "without_provider_keys",
    "request_dict",
    "count_body",
    "COUNT_KEYS",
    "dump_body",
    "reply_from_message",
    "message_from_json",
    "error_from_response",
    "error_from_body",
    "redact",
    "message_events",
]


def request_body(request: ModelRequest, *, stream: bool, entries: Optional[EntryBytes] = None
                 ) -> Tuple[bytes, bool]:
    """The JSON body for ``request`` and whether it asks for a stream.

    ``system`` is left out when None, ``tools`` when empty; ``output_format`` becomes
    ``output_config.format``; ``extra`` keys are sent as given and win over ours
    (including ``stream``). ``entries`` (the client's) spares encoding again the
    messages an earlier request sent (``entries.py``).
    """
    body = request_dict(request, stream=stream)
    return dump_body(body, entries), body.get("stream") is True


def dump_body(body: Mapping[str, Any], entries: Optional[EntryBytes] = None) -> bytes:
    """``body`` (a ``request_dict``, maybe edited) as JSON; with ``entries``, its messages
    joined from their cached bytes (the same bytes)."""
    messages = body.get("messages")
    if type(messages) is not list:
        return dump(body)
    if entries is None:
        return dump({**body, "messages": without_provider_keys(messages)})
    return entries.dump({**body, "messages": MARK}, "messages", messages, _sendable)


def _sendable(message: Any) -> Tuple[Any]:
    """One history entry as the Messages API takes it (``without_provider_keys``)."""
    if type(message) is dict and ("openai_items" in message or "gemini_parts" in message):
        return ({k: v for k, v in message.items() if k not in PROVIDER_KEYS},)
    return (message,)


def request_dict(request: ModelRequest, *, stream: bool) -> Dict[str, Any]:
    """``request_body``'s dict, before ``dump_body`` makes it JSON (Bedrock and Vertex
    edit it)."""
    if not request.model:
        raise ValueError("AnthropicClient needs ModelRequest.model (the model name)")
    body: Dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens}
    if request.system is not None:
        body["system"] = request.system
    body["messages"] = request.messages  # dump_body leaves out other codecs' keys
    if request.tools:
        body["tools"] = request.tools
    if request.output_format is not None:
        body["output_config"] = {"format": {"type": "json_schema",
                                            "schema": request.output_format}}
    if stream:
        body["stream"] = True
    body.update(request.extra)
    return body


# What the Messages API's count_tokens takes of a request body (max_tokens, stream and
# sampling options are refused there).
COUNT_KEYS = frozenset(("model", "messages", "system", "tools", "tool_choice", "thinking",
                        "mcp_servers", "output_config", "context_management",
                        "anthropic_version", "anthropic_beta"))


def count_body(request: ModelRequest) -> Dict[str, Any]:
    """The count_tokens body for ``request``: its Messages body without what the counting
    endpoint refuses."""
    return {k: v for k, v in request_dict(request, stream=False).items() if k in COUNT_KEYS}


def without_provider_keys(messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``messages`` without another codec's reply keys (``PROVIDER_KEYS``: the Responses
    API's reasoning items), which the Messages API would refuse; the list itself when no
    message has one (checked at C speed: this runs on every request)."""
    if not any(map(operator.contains, messages, repeat("openai_items"))) and \
            not any(map(operator.contains, messages, repeat("gemini_parts"))):
        return messages
    return [{k: v for k, v in m.items() if k not in PROVIDER_KEYS}
            if "openai_items" in m or "gemini_parts" in m else m for m in messages]


def reply_from_message(message: Mapping[str, Any]) -> Dict[str, Any]:
    """Turn a Messages API message object into the assistant dict clients return;
    ``APIConnectionError`` naming the field when one has the wrong type (SPEC 16a)."""
    usage = optional(message.get("usage"), dict, "usage", "an object") or {}
    content = optional(message.get("content"), list, "content", "a list") or []
    if not content and message.get("stop_reason") is None:
        raise no_content(message)
    reply = {
        "role": "assistant",
        "content": list(content),
        "stop_reason": optional(message.get("stop_reason"), str, "stop_reason", "a string"),
        "usage": {key: token_count(usage.get(key)) for key in USAGE_FIELDS},
        "model": optional(message.get("model"), str, "model", "a string"),
        "provider_response_id": optional(message.get("id"), str, "id", "a string"),
    }
    check_reply(reply)
    return reply


def message_from_json(content: bytes) -> Dict[str, Any]:
    """The message object in a 2xx JSON body (an error body raises its error)."""
    try:
        message = load_json(content)
    except ValueError as exc:  # not JSON, or nested too deeply to parse
        raise APIConnectionError(f"malformed JSON response ({exc}): {content[:200]!r}"
                                 ) from None
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
    if cls is BadRequestError and is_prompt_too_long(message, error.get("code")):
        cls = PromptTooLongError
    return cls(message, request_id=request_id, body=body)


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
