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
import uuid
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import (
    APIConnectionError,
    APIStatusError,
    PromptTooLongError,
    error_class_for_type,
    is_prompt_too_long,
    status_error_class,
)
from ..usage import token_count
from .base import ModelRequest
from .status import error_message, load_json

__all__ = ["Translations", "chat_body", "chat_messages", "chat_tools",
           "reply_from_completion", "usage_from_chat", "stop_reason_from_finish",
           "tool_input", "new_call_id", "content_parts", "assemble", "call_block",
           "finished", "error_from_chat"]

_FINISH = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


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


def chat_body(request: ModelRequest, *, stream: bool, max_tokens_field: str,
              cache: Optional[Translations] = None) -> Tuple[bytes, bool]:
    """The JSON body for ``request`` and whether it asks for a stream (``extra`` wins)."""
    if not request.model:
        raise ValueError("OpenAIChatClient needs ModelRequest.model (the model name)")
    body: Dict[str, Any] = {"model": request.model,
                            "messages": chat_messages(request.system, request.messages, cache),
                            max_tokens_field: request.max_tokens}
    if request.tools:
        body["tools"] = _tools(request.tools, cache)
    if request.output_format is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "output", "schema": request.output_format, "strict": True}}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(request.extra)
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return data, body.get("stream") is True


def _tools(tools: List[Dict[str, Any]], cache: Optional[Translations]) -> List[Dict[str, Any]]:
    if cache is None:
        return chat_tools(tools)
    seen, translated = cache.tools
    if len(seen) != len(tools) or not all(map(operator.is_, seen, tools)):
        translated = chat_tools(tools)
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


def _system_text(system: Any) -> str:
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
            out.append({"role": "system", "content": _system_text(system)})
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
            out.append({"role": "system", "content": _system_text(system)})
    by_id = cache.by_id
    for message in messages[done:]:
        hit = by_id.get(id(message))
        if hit is not None and hit[0] is message:
            out.extend(hit[1])
            continue
        translated = _message(message)
        if len(by_id) >= _CACHE_MAX:
            by_id.clear()
        by_id[id(message)] = (message, translated)
        out.extend(translated)
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


# -- replies -------------------------------------------------------------------------------


def new_call_id() -> str:
    """A unique id for a tool call the server sent without one."""
    return f"call_lattice_{uuid.uuid4().hex[:24]}"


def tool_input(arguments: Any) -> Any:
    """The tool_use ``input`` for a call's ``arguments``: the parsed object, ``{}`` when
    absent, else the arguments as given (the loop then answers with an error result)."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = load_json(arguments)
        except ValueError:
            return arguments
        return parsed if isinstance(parsed, dict) else arguments
    return arguments


def stop_reason_from_finish(finish: Any, has_calls: bool) -> Any:
    """``finish_reason`` -> ``stop_reason``; none given: ``tool_use`` if calls came."""
    if finish is None or finish == "":
        return "tool_use" if has_calls else "end_turn"
    return _FINISH.get(finish, finish) if isinstance(finish, str) else finish


def usage_from_chat(usage: Any) -> Dict[str, int]:
    """Chat usage as lattice usage: cached prompt tokens counted as cache reads."""
    if not isinstance(usage, dict):
        usage = {}
    details = usage.get("prompt_tokens_details")
    cached = token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return {"input_tokens": max(0, token_count(usage.get("prompt_tokens")) - cached),
            "output_tokens": token_count(usage.get("completion_tokens")),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached}


def error_from_chat(error: Any, request_id: Optional[str] = None) -> APIStatusError:
    """The error an ``error`` object in a 2xx body or a stream names (by its status code,
    else its type); too-long prompts are ``PromptTooLongError``."""
    detail = error if isinstance(error, dict) else {}
    message = error_message({"error": error}) or "error in the reply"
    status = detail.get("status_code", detail.get("code"))
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    if status is None and isinstance(detail.get("status"), int):
        status = detail["status"]
    cls = status_error_class(status) if status else error_class_for_type(detail.get("type"))
    if status in (None, 400, 413) and is_prompt_too_long(message, detail.get("code")):
        cls = PromptTooLongError
    return cls(message, status_code=status, request_id=request_id, body={"error": error})


def content_parts(content: Any, texts: List[str], reasoning: List[str]) -> None:
    """Text and thinking out of a ``content`` that is a str or a list of parts (Mistral)."""
    if isinstance(content, str):
        texts.append(content)
        return
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "thinking":
            inner = part.get("thinking")
            if isinstance(inner, str):
                reasoning.append(inner)
            else:
                content_parts(inner, reasoning, reasoning)


def assemble(texts: List[str], reasoning: List[str], calls: List[Dict[str, Any]],
             refusal: Any) -> List[Dict[str, Any]]:
    """Content blocks in Messages order: thinking, text, tool_use."""
    blocks: List[Dict[str, Any]] = []
    thinking = "".join(reasoning)
    if thinking:
        blocks.append({"type": "thinking", "thinking": thinking})
    text = "".join(texts)
    if not text and isinstance(refusal, str) and refusal:
        text = refusal
    if text:
        blocks.append({"type": "text", "text": text})
    blocks.extend(calls)
    return blocks


def call_block(call_id: Any, name: Any, arguments: Any) -> Dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise APIConnectionError(f"the reply has a tool call without a name (id {call_id!r})")
    return {"type": "tool_use", "id": call_id if isinstance(call_id, str) and call_id
            else new_call_id(), "name": name, "input": tool_input(arguments)}


def reply_from_completion(body: Any) -> Dict[str, Any]:
    """A ``chat.completion`` object as the assistant dict clients return."""
    if not isinstance(body, dict):
        raise APIConnectionError(f"the reply is not a JSON object: {str(body)[:200]!r}")
    if body.get("error"):
        raise error_from_chat(body["error"])
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise APIConnectionError(
            f"the reply has no choices (not a chat.completion?): {json.dumps(body)[:200]}")
    message = choices[0].get("message")
    message = message if isinstance(message, dict) else {}
    texts: List[str] = []
    reasoning: List[str] = []
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            reasoning.append(message[key])
            break
    content_parts(message.get("content"), texts, reasoning)
    calls = [call_block(c.get("id"), (c.get("function") or {}).get("name"),
                        (c.get("function") or {}).get("arguments"))
             for c in message.get("tool_calls") or () if isinstance(c, dict)]
    legacy = message.get("function_call")
    if not calls and isinstance(legacy, dict) and legacy.get("name"):
        calls.append(call_block(None, legacy["name"], legacy.get("arguments")))
    refusal = message.get("refusal")
    stop = stop_reason_from_finish(choices[0].get("finish_reason"), bool(calls))
    if stop == "end_turn" and not "".join(texts) and isinstance(refusal, str) and refusal:
        stop = "refusal"
    return finished(body, assemble(texts, reasoning, calls, refusal), stop,
                    body.get("usage"))


def finished(body: Mapping[str, Any], content: List[Dict[str, Any]], stop: Any,
             usage: Any) -> Dict[str, Any]:
    return {"role": "assistant", "content": content, "stop_reason": stop,
            "usage": usage_from_chat(usage), "model": body.get("model") or None,
            "provider_response_id": body.get("id") or None}
