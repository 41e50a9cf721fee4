"""Chat Completions JSON shapes <-> the Messages-shaped history, without any I/O.

The loop, history and stores keep the Messages shape; this module translates each request
(``chat_body``) and each reply (``reply_from_completion``), following SPEC section 11.
What Chat Completions cannot carry is left out of requests: thinking blocks (never sent
back), ``cache_control`` marks and other Anthropic-only keys (dicts are rebuilt, not
copied). Images inside a tool result go in the user message after the tool messages,
since a ``tool`` message holds text only.
"""

from __future__ import annotations

import json
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

from .base import ModelRequest
from .chat_reply import (  # the other direction, re-exported: one module per direction
    assemble,
    call_block,
    content_parts,
    error_from_chat,
    finished,
    new_call_id,
    reply_from_completion,
    stop_reason_from_finish,
    tool_input,
    usage_from_chat,
)
from .entries import MARK, EntryBytes, dump

__all__ = ["Translations", "chat_body", "chat_messages", "chat_tools", "cached_tools",
           "system_text",
           "reply_from_completion", "usage_from_chat", "stop_reason_from_finish",
           "tool_input", "new_call_id", "content_parts", "assemble", "call_block",
           "finished", "error_from_chat"]



# -- requests ------------------------------------------------------------------------------


_CACHE_MAX = 8192


class Translations:
    """One client's memory of what it translated, so a long conversation is not translated
    again on every request: the loop sends the same history dicts turn after turn and
    never edits them (SPEC 6).

    ``by_id`` maps a history dict's id to ``(the dict, its Chat messages)``; holding the
    dict keeps the id unique. ``last`` is the last request's ``(system, messages,
    translation)``: a request whose messages start with the same dicts (by identity, a
    C-speed check) reuses that translation and translates only the new tail. Each is
    replaced whole (one atomic store), so threads sharing a client never see half of one.
    """

    __slots__ = ("by_id", "last", "tools")

    def __init__(self) -> None:
        self.by_id: Dict[int, Tuple[Dict[str, Any], List[Dict[str, Any]]]] = {}
        self.last: Tuple[Any, Tuple[Any, ...], Tuple[Dict[str, Any], ...]] = (None, (), ())
        self.tools: Tuple[Tuple[Any, ...], List[Dict[str, Any]]] = ((), [])

    def extend(self, out: List[Dict[str, Any]], messages: List[Dict[str, Any]],
               translate: Callable[[Dict[str, Any]], List[Dict[str, Any]]]) -> None:
        """Append the translation of each of ``messages`` to ``out``, from ``by_id`` when
        this dict was translated before (both wire formats use it)."""
        by_id = self.by_id
        for message in messages:
            hit = by_id.get(id(message))
            if hit is not None and hit[0] is message:
                out.extend(hit[1])
                continue
            translated = translate(message)
            if len(by_id) >= _CACHE_MAX:
                by_id.clear()
            by_id[id(message)] = (message, translated)
            out.extend(translated)


def chat_body(request: ModelRequest, *, stream: bool, max_tokens_field: str,
              cache: Optional[Translations] = None, entries: Optional[EntryBytes] = None
              ) -> Tuple[bytes, bool]:
    """The JSON body for ``request`` and whether it asks for a stream (``extra`` wins).
    ``entries`` (the client's) joins each history message's bytes, encoded once."""
    if not request.model:
        raise ValueError("OpenAIChatClient needs ModelRequest.model (the model name)")
    joined = entries is not None and type(request.messages) is list
    body: Dict[str, Any] = {"model": request.model, "messages": MARK if joined else
                            chat_messages(request.system, request.messages, cache),
                            max_tokens_field: request.max_tokens}
    if request.tools:
        body["tools"] = cached_tools(request.tools, cache, chat_tools)
    if request.output_format is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": request.output_format, "strict": True}}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(request.extra)
    if not joined:
        return dump(body), body.get("stream") is True
    system = request.system
    lead = [{"role": "system", "content": system_text(system)}] if system else []
    data = entries.dump(body, "messages", request.messages, _message, lead)  # type: ignore
    return data, body.get("stream") is True


def cached_tools(tools: List[Dict[str, Any]], cache: Optional[Translations],
                 translate: Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]
                 ) -> List[Dict[str, Any]]:
    """``translate(tools)``, or the last request's translation when its tools are the same
    dicts (by identity: an agent sends the same tool list every turn); both wire formats."""
    if cache is None:
        return translate(tools)
    seen, translated = cache.tools
    if len(seen) != len(tools) or not all(map(operator.is_, seen, tools)):
        translated = translate(tools)
        cache.tools = (tuple(tools), translated)
    return translated


def chat_tools(tools: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Messages tool definitions as Chat ``function`` tools (``strict`` kept)."""
    out = []
    for tool in tools:
        function: Dict[str, Any] = {"name": tool.get("name")}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("input_schema") or {"type": "object",
                                                              "properties": {}}
        if tool.get("strict") is True:
            function["strict"] = True
        out.append({"type": "function", "function": function})
    return out


def system_text(system: Any) -> str:
    """A system prompt (a str or text blocks) as one str: neither API takes blocks there."""
    if isinstance(system, str):
        return system
    return "\n\n".join(b.get("text", "") for b in system or ()
                       if isinstance(b, dict) and b.get("type") == "text")


def chat_messages(system: Any, messages: List[Dict[str, Any]], cache: Optional[Translations] = None
                  ) -> List[Dict[str, Any]]:
    """The history (Messages shape) as Chat Completions messages, ``system`` first.

    ``cache`` (one per client, see ``Translations``) spares translating again what an
    earlier request of the conversation already sent.
    """
    if cache is None:
        out: List[Dict[str, Any]] = []
        if system:
            out.append({"role": "system", "content": system_text(system)})
        for message in messages:
            out.extend(_message(message))
        return out
    last_system, last_in, last_out = cache.last
    done = len(last_in)
    if done and len(messages) >= done and last_system == system and \
            all(map(operator.is_, last_in, messages)):
        out = list(last_out)
    else:
        done, out = 0, []
        if system:
            out.append({"role": "system", "content": system_text(system)})
    cache.extend(out, messages[done:], _message)
    cache.last = (system, tuple(messages), tuple(out))
    return out


def _message(message: Dict[str, Any]) -> List[Dict[str, Any]]:
    content = message.get("content")
    if message.get("role") == "assistant":
        return [_assistant(content)]
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    return _user(content or [])


def _assistant(content: Any) -> Dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts, calls = [], []
    for block in content or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            arguments = block.get("input")
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name"),
                "arguments": arguments if isinstance(arguments, str)
                else json.dumps(arguments if arguments is not None else {},
                                ensure_ascii=False)}})
        # thinking, redacted_thinking and server-side blocks are not sent
    message: Dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _user(blocks: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One ``tool`` message per tool_result, in order, then a user message for the rest."""
    out: List[Dict[str, Any]] = []
    parts: List[Dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "tool_result":
            text, images = _tool_result(block)
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                        "content": text})
            if images:
                parts.append({"type": "text",
                              "text": f"(images from tool call {block.get('tool_use_id')})"})
                parts.extend(images)
        else:
            parts.extend(_part(block))
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "\n".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _part(block: Dict[str, Any]) -> List[Dict[str, Any]]:
    kind = block.get("type")
    if kind == "text":
        return [{"type": "text", "text": block.get("text", "")}]
    if kind == "image":
        source = block.get("source") or {}
        if source.get("type") == "url":
            url = source.get("url", "")
        else:
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        return [{"type": "image_url", "image_url": {"url": url}}]
    if kind == "document" and (block.get("source") or {}).get("type") == "text":
        return [{"type": "text", "text": block["source"].get("data", "")}]
    raise ValueError(f"a {kind!r} content block cannot be sent to Chat Completions "
                     "(text, images and tool results can)")


def _tool_result(block: Dict[str, Any]) -> Tuple[str, List[Dict[str, Any]]]:
    content = block.get("content")
    images: List[Dict[str, Any]] = []
    if isinstance(content, list):
        texts = []
        for item in content:
            for part in _part(item):
                if part["type"] == "text":
                    texts.append(part["text"])
                else:
                    images.append(part)
        text = "\n".join(texts)
    else:
        text = "" if content is None else str(content)
    if block.get("is_error") and not text.lstrip().lower().startswith("error"):
        text = "Error: " + text
    return text, images
