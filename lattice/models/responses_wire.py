"""Responses API JSON shapes <-> the Messages-shaped history, without any I/O.

Requests (``responses_body``): the system prompt is ``instructions``; the history becomes
``input`` items: user text and images as ``message`` items, ``tool_use`` blocks as
``function_call`` items and ``tool_result`` blocks as ``function_call_output`` items (paired
by ``call_id``), assistant text as assistant messages. Tools are function tools with
``strict`` always explicit; ``output_format`` is ``text.format`` (name ``"output"``).

Replies (``reply_from_response``): ``message`` items become text blocks (a refusal's text
when there is no other text), ``function_call`` items ``tool_use`` blocks, reasoning
summaries a ``thinking`` block (for display; never sent). The output items the content
does not carry (reasoning with its ``encrypted_content``, built-in tool calls) are kept in
the reply's ``openai_items`` key, in output order, with stubs (type and ids) standing for
the message and function_call items the text and tool_use blocks came from. The next
request sends them back in the same order: the API pairs a reasoning item with the items
that follow it by id. No other codec sends that key (``messages.PROVIDER_KEYS``).
"""

from __future__ import annotations

import json
import operator
from typing import Any, Dict, List, Optional, Tuple

from ..errors import APIConnectionError
from ..messages import MAX_DEPTH, too_deep
from .base import ModelRequest
from .chat_wire import Translations, cached_tools, call_block
from .chat_wire import system_text as text_of_system
from .entries import MARK, EntryBytes, dump
from .responses_status import error_from_responses, usage_from_responses
from .shape import no_content

__all__ = ["ITEMS_KEY", "responses_body", "responses_input", "responses_tools",
           "reply_from_response", "usage_from_responses", "error_from_responses",
           "text_of_system"]

ITEMS_KEY = "openai_items"
_ENCRYPTED = "reasoning.encrypted_content"
# Parts of a tool_use / text block the stub does not repeat.
_USUAL_CALL = frozenset(("type", "id", "call_id", "status"))  # sent with every call


# -- requests ------------------------------------------------------------------------------


def responses_body(request: ModelRequest, *, stream: bool, store: bool,
                   cache: Optional[Translations] = None, entries: Optional[EntryBytes] = None
                   ) -> Tuple[bytes, bool]:
    """The JSON body for ``request`` and whether it asks for a stream (``extra`` wins).
    ``entries`` (the client's) joins each history message's bytes, encoded once."""
    if not request.model:
        raise ValueError("OpenAIResponsesClient needs ModelRequest.model (the model name)")
    joined = entries is not None and type(request.messages) is list
    body: Dict[str, Any] = {"model": request.model, "input": MARK if joined else
                            responses_input(request.messages, cache)}
    instructions = text_of_system(request.system)
    if instructions:
        body["instructions"] = instructions
    body["max_output_tokens"] = request.max_tokens
    if request.tools:
        body["tools"] = cached_tools(request.tools, cache, responses_tools)
    if request.output_format is not None:
        body["text"] = {"format": {"type": "json_schema", "name": "output",
                                   "schema": request.output_format, "strict": True}}
    body["store"] = store
    if not store:  # reasoning comes back encrypted, to be sent back next turn
        body["include"] = [_ENCRYPTED]
    if stream:
        body["stream"] = True
    body.update(request.extra)
    include = body.get("include")
    if body.get("store") is False and isinstance(include, list) and \
            _ENCRYPTED not in include:  # an extra include adds to ours
        body["include"] = include + [_ENCRYPTED]
    if joined:
        data = entries.dump(body, "input", request.messages, _message)  # type: ignore
    else:
        data = dump(body)
    return data, body.get("stream") is True


def responses_tools(tools: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Messages tool definitions as function tools, ``strict`` explicit."""
    out = []
    for tool in tools:
        function: Dict[str, Any] = {"type": "function", "name": tool.get("name")}
        if tool.get("description"):
            function["description"] = tool["description"]
        function["parameters"] = tool.get("input_schema") or {"type": "object",
                                                              "properties": {}}
        function["strict"] = tool.get("strict") is True
        out.append(function)
    return out


def responses_input(messages: List[Dict[str, Any]], cache: Optional[Translations] = None
                    ) -> List[Dict[str, Any]]:
    """The history as ``input`` items. ``cache`` (one per client) spares translating again
    what an earlier request of the same conversation sent (see ``chat_wire.Translations``)."""
    if cache is None:
        return [item for message in messages for item in _message(message)]
    _, last_in, last_out = cache.last
    done = len(last_in)
    if done and len(messages) >= done and all(map(operator.is_, last_in, messages)):
        out = list(last_out)
    else:
        done, out = 0, []
    cache.extend(out, messages[done:], _message)
    cache.last = (None, tuple(messages), tuple(out))
    return out


def _message(message: Dict[str, Any]) -> List[Dict[str, Any]]:
    content = message.get("content")
    if message.get("role") == "assistant":
        return _assistant(content, message.get(ITEMS_KEY))
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    return _user(content or [])


def _assistant(content: Any, kept: Any) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    blocks = [b for b in content or () if isinstance(b, dict)
              and b.get("type") in ("text", "tool_use")]
    out: List[Dict[str, Any]] = []
    for item in kept if isinstance(kept, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message" and "content" not in item:  # stands for the next text block
            found = next((b for b in blocks if b.get("type") == "text"), None)
            if found is not None:
                blocks.remove(found)
                notes = item.get("annotations")
                stub = {k: v for k, v in item.items() if k != "annotations"}
                out.append({**stub, "role": "assistant", "status": "completed", "content": [
                    {"type": "output_text", "text": found.get("text", ""),
                     "annotations": notes if isinstance(notes, list) else []}]})
        elif kind == "function_call" and "name" not in item:  # stands for a tool_use block
            found = next((b for b in blocks if b.get("type") == "tool_use"
                          and b.get("id") == item.get("call_id")), None)
            if found is not None:
                blocks.remove(found)
                out.append(_call(found, item))
        else:
            out.append(item)
    for block in blocks:  # blocks without a stub (another provider's reply, an edit)
        if block["type"] == "tool_use":
            out.append(_call(block, {"type": "function_call"}))
        elif block.get("text"):
            out.append({"role": "assistant", "content": block["text"]})
    while out and out[-1].get("type") == "reasoning":
        # Reasoning with nothing after it (a reply cut by max_output_tokens while thinking)
        # is refused by the API ("provided without its required following item").
        out.pop()
    return out


def _call(block: Dict[str, Any], stub: Dict[str, Any]) -> Dict[str, Any]:
    arguments = block.get("input")
    return {**stub, "call_id": block.get("id"), "name": block.get("name"),
            "arguments": arguments if isinstance(arguments, str)
            else json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)}


def _user(blocks: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One ``function_call_output`` per tool_result, in order, then a message for the rest."""
    out: List[Dict[str, Any]] = []
    parts: List[Dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "tool_result":
            out.append({"type": "function_call_output", "call_id": block.get("tool_use_id"),
                        "output": _tool_output(block)})
        else:
            parts.append(_part(block))
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _part(block: Dict[str, Any]) -> Dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "input_text", "text": block.get("text", "")}
    source = block.get("source") or {}
    where = source.get("type")
    url = source.get("url") if where == "url" else \
        f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
    if kind == "image":
        if where == "file":  # uploaded with the Files API
            return {"type": "input_image", "file_id": source.get("file_id"), "detail": "auto"}
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if kind == "document" and where == "text":
        return {"type": "input_text", "text": source.get("data", "")}
    if kind == "document" and where == "file":
        return {"type": "input_file", "file_id": source.get("file_id")}
    if kind == "document" and where == "url":
        return {"type": "input_file", "file_url": url}
    if kind == "document" and where == "base64":
        return {"type": "input_file", "filename": block.get("title") or "document.pdf",
                "file_data": url}
    raise ValueError(f"a {kind!r} content block cannot be sent to the Responses API "
                     "(text, images, documents and tool results can)")


def _tool_output(block: Dict[str, Any]) -> Any:
    """A str result as text; a list of blocks as a list of parts (images included)."""
    content = block.get("content")
    error = bool(block.get("is_error"))
    if isinstance(content, list):
        parts = [_part(item) for item in content if isinstance(item, dict)]
        if error and parts and parts[0]["type"] == "input_text":
            parts[0] = dict(parts[0], text=_error_text(parts[0]["text"]))
        elif error:
            parts.insert(0, {"type": "input_text", "text": "Error"})
        return parts
    text = "" if content is None else str(content)
    return _error_text(text) if error else text


def _error_text(text: str) -> str:
    return text if text.lstrip().lower().startswith("error") else "Error: " + text


# -- replies -------------------------------------------------------------------------------


def reply_from_response(body: Any) -> Dict[str, Any]:
    """A ``response`` object as the assistant dict clients return."""
    if not isinstance(body, dict):
        raise APIConnectionError(f"the reply is not a JSON object: {str(body)[:200]!r}")
    status = body.get("status")
    if status == "failed" or (body.get("error") and "output" not in body):
        raise error_from_responses(body.get("error"))
    output = body.get("output")
    if output is None and status is None:  # a gateway's {}
        raise no_content(body)
    if not isinstance(output, list):
        raise APIConnectionError(
            f"the reply has no output list (not a response?): {json.dumps(body)[:200]}")
    for field in ("id", "model"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise APIConnectionError(f"the reply's {field} is not a string: "
                                     f"{str(body[field])[:100]!r}")
    content, kept, refused = _content(output)
    if not content and not kept and status is None:
        raise no_content(body)
    if kept and too_deep(kept, MAX_DEPTH - 2):
        raise APIConnectionError(f"the reply's output items are nested deeper than "
                                 f"{MAX_DEPTH} levels; refused")
    stop: Any = "end_turn"
    if any(b["type"] == "tool_use" for b in content):
        stop = "tool_use"
    elif refused:
        stop = "refusal"
    if status == "incomplete":
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        stop = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}.get(
            reason, reason or "max_tokens")  # type: ignore[arg-type]
    elif status not in ("completed", None):
        stop = status  # queued / in_progress (background) and the like, as given
    reply: Dict[str, Any] = {"role": "assistant", "content": content, "stop_reason": stop,
                             "usage": usage_from_responses(body.get("usage")),
                             "model": body.get("model") or None,
                             "provider_response_id": body.get("id") or None}
    if kept:
        reply[ITEMS_KEY] = kept
    return reply


def _content(output: List[Any]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], bool]:
    """(content blocks, items to keep or [] when none is needed, refused without text)."""
    thinking: List[str] = []
    blocks: List[Dict[str, Any]] = []
    kept: List[Dict[str, Any]] = []
    needed = refused = False
    for item in output:
        if not isinstance(item, dict):
            raise APIConnectionError(f"the reply has an output item that is not an "
                                     f"object: {str(item)[:200]!r}")
        kind = item.get("type")
        if kind == "message":
            text, refusal = _message_text(item)
            if text or refusal:
                blocks.append({"type": "text", "text": text or refusal})
                refused = refused or not text
                stub = _stub(item)
                notes = _annotations(item)
                if notes:  # citations (web or file search): sent back with the text
                    stub["annotations"] = notes
                kept.append(stub)
                needed = needed or "phase" in item or bool(notes)
                continue
        elif kind == "function_call":
            block = call_block(item.get("call_id"), item.get("name"), item.get("arguments"))
            blocks.append(block)
            # Every field the API sent but the two the block carries goes back as sent
            # (SPEC 21b: ``namespace`` and any field added later); one beyond the usual
            # ones makes the items worth keeping.
            stub = {k: v for k, v in item.items()
                    if v is not None and k not in ("name", "arguments")}
            kept.append(dict(stub, call_id=block["id"]))
            needed = needed or any(k not in _USUAL_CALL for k in stub)
            continue
        elif kind == "reasoning":
            thinking += _reasoning_text(item)
        kept.append({k: v for k, v in item.items() if v is not None})  # nulls: not sent back
        needed = True
    if thinking:
        blocks.insert(0, {"type": "thinking", "thinking": "\n\n".join(thinking)})
    return blocks, kept if needed else [], refused


def _stub(item: Dict[str, Any]) -> Dict[str, Any]:
    """What stands for a message item: all but its text, role and status."""
    return {k: v for k, v in item.items()
            if v is not None and k not in ("content", "role", "status")}


def _message_text(item: Dict[str, Any]) -> Tuple[str, str]:
    texts, refusals = [], []
    parts = item.get("content")
    if isinstance(parts, str):
        return parts, ""
    for part in parts if isinstance(parts, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("output_text", "text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            refusals.append(part["refusal"])
    return "".join(texts), "".join(refusals)


def _annotations(item: Dict[str, Any]) -> List[Any]:
    """The annotations of a message's text parts (their offsets count in the joined text
    only when there is one part, as the API sends)."""
    notes: List[Any] = []
    parts = item.get("content")
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and isinstance(part.get("annotations"), list):
            notes += part["annotations"]  # only output_text parts carry them
    return notes


def _reasoning_text(item: Dict[str, Any]) -> List[str]:
    found = []
    for key in ("summary", "content"):
        for part in item.get(key) or () if isinstance(item.get(key), list) else ():
            if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                found.append(part["text"])
    return found
