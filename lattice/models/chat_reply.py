"""Chat Completions replies -> the assistant dict clients return, without any I/O.

``reply_from_completion`` reads a ``chat.completion`` object, following SPEC section 11;
``chat_stream.py`` assembles streamed chunks with the same pieces (``content_parts``,
``call_block``, ``assemble``, ``finished``). A field of the wrong type is an
``APIConnectionError`` naming it (SPEC 16a), never a bare ``TypeError``.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, List, Mapping, Optional

from ..errors import (
    APIConnectionError,
    APIStatusError,
    PromptTooLongError,
    error_class_for_type,
    is_prompt_too_long,
    status_error_class,
)
from ..usage import token_count
from .shape import check_reply, malformed, no_content, optional
from .status import error_message, load_json

__all__ = ["reply_from_completion", "usage_from_chat", "stop_reason_from_finish",
           "tool_input", "new_call_id", "content_parts", "assemble", "call_block",
           "finished", "error_from_chat"]

_FINISH = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


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


def content_parts(content: Any, texts: List[str], reasoning: List[str],
                  field: str = "content") -> None:
    """Text and thinking out of a ``content`` that is a str or a list of parts (Mistral);
    anything else but None is ``APIConnectionError`` naming ``field``."""
    if isinstance(content, str):
        texts.append(content)
        return
    optional(content, list, field, "a string, a list of parts or null")
    for part in content or ():
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
    if not choices:  # (a gateway's {}, or not a chat.completion)
        raise no_content(body, "no choices: not a chat.completion?")
    choice = _first(choices, "choices")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise malformed("choices[0].message", message, "an object")
    texts: List[str] = []
    reasoning: List[str] = []
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            reasoning.append(message[key])
            break
    content_parts(message.get("content"), texts, reasoning, "choices[0].message.content")
    calls = [_call(call, f"choices[0].message.tool_calls[{index}]")
             for index, call in enumerate(optional(message.get("tool_calls"), list,
                                                   "choices[0].message.tool_calls", "a list")
                                          or ())]
    legacy = optional(message.get("function_call"), dict, "choices[0].message.function_call",
                      "an object")
    if not calls and legacy is not None and legacy.get("name"):
        calls.append(call_block(None, legacy["name"], legacy.get("arguments")))
    refusal = message.get("refusal")
    finish = optional(choice.get("finish_reason"), str, "choices[0].finish_reason", "a string")
    stop = stop_reason_from_finish(finish, bool(calls))
    if stop == "end_turn" and not "".join(texts) and isinstance(refusal, str) and refusal:
        stop = "refusal"
    content = assemble(texts, reasoning, calls, refusal)
    if not content and not finish:
        raise no_content(body, "no choices: not a chat.completion?")
    return finished(body, content, stop, body.get("usage"))


def _first(choices: Any, field: str) -> Dict[str, Any]:
    """``choices[0]``, an object, or ``APIConnectionError`` naming ``field``."""
    if not isinstance(choices, list):
        raise malformed(field, choices, "a list")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise malformed(f"{field}[0]", choice, "an object")
    return choice


def _call(call: Any, field: str) -> Dict[str, Any]:
    if not isinstance(call, dict):
        raise malformed(field, call, "an object")
    function = optional(call.get("function"), dict, f"{field}.function", "an object") or {}
    return call_block(call.get("id"), function.get("name"), function.get("arguments"))


def finished(body: Mapping[str, Any], content: List[Dict[str, Any]], stop: Any,
             usage: Any) -> Dict[str, Any]:
    """The assistant dict, checked (``shape.check_reply``); fields named as sent."""
    reply = {"role": "assistant", "content": content, "stop_reason": stop,
             "usage": usage_from_chat(optional(usage, dict, "usage", "an object")),
             "model": optional(body.get("model"), str, "model", "a string") or None,
             "provider_response_id": optional(body.get("id"), str, "id", "a string") or None}
    check_reply(reply)
    return reply
