"""What tracing records, in the OpenTelemetry GenAI semantic conventions' terms (SPEC 16a).

``gen_ai.provider.name`` comes from the model client (``provider_name``, else its class);
``gen_ai.response.finish_reasons`` are the provider's own values (an OpenAI-family
client's ``stop_reason`` is mapped back to its ``finish_reason``), each output message's
``finish_reason`` the conventions' (``stop``, ``length``, ``content_filter``,
``tool_call``, ``error``: SPEC 21b); message content follows the conventions' JSON
schemas: messages are ``{"role", "parts"}`` (output messages also ``finish_reason``),
system instructions a list of parts. Parts: ``text`` (``content``), ``tool_call``
(``id``, ``name``, ``arguments``), ``tool_call_response`` (``id``, ``response``),
``reasoning`` (``content``), ``blob`` and ``uri`` for images and documents; any other
block is kept as a generic part of its type.
A user message's tool results become a ``tool`` message, as the conventions model them.

Pure functions of plain data: nothing here imports OpenTelemetry.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

__all__ = ["provider_name", "finish_reason", "output_finish_reason", "server_of",
           "input_messages", "output_messages", "system_instructions", "parts"]

# Known client families by a word of their class name, for clients that do not say.
_FAMILIES = (("bedrock", "aws.bedrock"), ("vertex", "gcp.vertex_ai"), ("gemini", "gcp.gemini"),
             ("azure", "azure.ai.openai"), ("openai", "openai"), ("anthropic", "anthropic"))
# The Messages-shaped stop_reason of an OpenAI-family reply, back to its finish_reason
# (the inverse of SPEC 11's mapping).
_OPENAI_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                  "tool_use": "tool_calls", "refusal": "content_filter"}
_OPENAI_FAMILY = frozenset(["openai", "azure.ai.openai"])


def provider_name(client: Any) -> str:
    """``gen_ai.provider.name`` for ``client``: its ``provider_name`` str when it has one,
    else the family its class name says (``AnthropicClient`` -> ``anthropic``), else the
    class name. None means the Agent's default client: ``anthropic``."""
    if client is None:
        return "anthropic"
    name = getattr(client, "provider_name", None)
    if isinstance(name, str) and name:
        return name
    kind = type(client).__name__
    for word, family in _FAMILIES:
        if word in kind.lower():
            return family
    return kind


def finish_reason(provider: str, stop_reason: Any) -> Optional[str]:
    """The provider's own value for a reply's ``stop_reason`` (None when there is none)."""
    if not isinstance(stop_reason, str) or not stop_reason:
        return None
    if provider in _OPENAI_FAMILY:
        return _OPENAI_FINISH.get(stop_reason, stop_reason)
    return stop_reason


# A Messages-shaped stop_reason as the conventions' finish_reason of an output message,
# whose schema allows only these five values.
_CONVENTIONS_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                       "max_tokens": "length", "model_context_window_exceeded": "length",
                       "tool_use": "tool_call", "refusal": "content_filter"}


def output_finish_reason(stop_reason: Any, error: bool = False) -> str:
    """An output message's ``finish_reason`` in the conventions' values (``stop``,
    ``length``, ``content_filter``, ``tool_call``, ``error``): ``error`` for a reply or
    query that ended in one, ``stop`` for a reason they have no word for."""
    if error:
        return "error"
    return _CONVENTIONS_FINISH.get(stop_reason, "stop") if isinstance(stop_reason, str) else (
        "stop")


def server_of(client: Any) -> Tuple[Optional[str], Optional[int]]:
    """``server.address`` and ``server.port`` of a model client: its ``base_url``'s host
    and port (the scheme's default when none is given); (None, None) without one."""
    url = getattr(client, "base_url", None)
    if not isinstance(url, str):
        return None, None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None, None
    if parts.hostname is None:
        return None, None
    return parts.hostname, port or {"https": 443, "http": 80}.get(parts.scheme)


def system_instructions(system: Any) -> Optional[List[Dict[str, Any]]]:
    """``gen_ai.system_instructions``: the system prompt as a list of parts."""
    if system is None or system == "" or system == []:
        return None
    return parts(system)


def input_messages(messages: Any) -> List[Dict[str, Any]]:
    """``gen_ai.input.messages`` for Messages-shaped ``messages``."""
    out: List[Dict[str, Any]] = []
    for message in messages or ():
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "user" and isinstance(content, list):
            results = [b for b in content if _kind(b) == "tool_result"]
            others = [b for b in content if _kind(b) != "tool_result"]
            if results:
                out.append({"role": "tool", "parts": parts(results)})
            if others:
                out.append({"role": "user", "parts": parts(others)})
            continue
        out.append({"role": role if isinstance(role, str) else "user",
                    "parts": parts(content)})
    return out


def output_messages(content: Any, finish: str) -> List[Dict[str, Any]]:
    """``gen_ai.output.messages``: one assistant message with its ``finish_reason``
    (``output_finish_reason``: the conventions' values)."""
    return [{"role": "assistant", "parts": parts(content), "finish_reason": finish}]


def parts(content: Any) -> List[Dict[str, Any]]:
    """The parts of a message's ``content`` (a str, or a list of content blocks)."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if not isinstance(content, list):
        return [] if content is None else [{"type": "text", "content": str(content)}]
    return [_part(block) for block in content]


def _kind(block: Any) -> Any:
    return block.get("type") if isinstance(block, dict) else None


def _part(block: Any) -> Dict[str, Any]:
    if not isinstance(block, dict):
        return {"type": "text", "content": str(block)}
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "content": block.get("text", "")}
    if kind == "tool_use":
        return {"type": "tool_call", "id": block.get("id"), "name": block.get("name"),
                "arguments": block.get("input")}
    if kind == "tool_result":
        response = block.get("content")
        if isinstance(response, list) and all(_kind(b) == "text" for b in response):
            response = "".join(b.get("text", "") for b in response)
        part = {"type": "tool_call_response", "id": block.get("tool_use_id"),
                "response": response}
        if block.get("is_error"):
            part["is_error"] = True
        return part
    if kind == "thinking":
        return {"type": "reasoning", "content": block.get("thinking", "")}
    if kind in ("image", "document"):
        return _media(kind, block.get("source"))
    return {k: v for k, v in block.items() if k != "cache_control"}  # a generic part


def _media(kind: str, source: Any) -> Dict[str, Any]:
    """An image or document block as a ``blob`` (inline data) or ``uri`` part."""
    modality = "image" if kind == "image" else "document"
    if not isinstance(source, dict):
        return {"type": kind}
    if source.get("type") == "base64":
        return {"type": "blob", "modality": modality, "mime_type": source.get("media_type"),
                "content": source.get("data")}
    if source.get("type") == "url":
        return {"type": "uri", "modality": modality, "uri": source.get("url")}
    if source.get("type") == "text":  # a plain-text document
        return {"type": "text", "content": source.get("data", "")}
    return {"type": kind, "source": source}
