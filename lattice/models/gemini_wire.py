"""Gemini ``generateContent`` requests from the Messages-shaped history, without any I/O.

The history becomes ``contents`` (roles ``user`` and ``model``): text, images and PDFs as
``inlineData`` (``fileData`` for a URL), ``tool_use`` blocks as ``functionCall`` parts and
``tool_result`` blocks as ``functionResponse`` parts (``{"result": text}``, or
``{"error": text}`` for an ``is_error`` result, with the call's ``name`` and, when the
model gave one, its ``id``). The system prompt is ``systemInstruction``; tools are
``functionDeclarations`` with ``parametersJsonSchema``; ``max_tokens`` is
``generationConfig.maxOutputTokens``; ``output_format`` is ``responseMimeType:
application/json`` with ``responseJsonSchema``.

What a Gemini reply carried beyond its blocks is kept in the assistant message under
``gemini_parts`` (``gemini_reply.py``): one entry per part of the reply, in order. An entry
standing for a text block is ``{"part": "text", ...}`` and one standing for a ``tool_use``
block ``{"part": "functionCall", "call": <block id>, "id": <the model's id, if any>,
...}``; their other keys (``thoughtSignature``) go back on that part. Any other entry
(thought parts, code execution, server tool calls, an empty text carrying a signature) is
a part sent back exactly as it came. An assistant message without ``gemini_parts`` came
from another provider: its first function call gets the placeholder signature Google
documents for such history (``skip_thought_signature_validator``).

A tool's images go inside its ``functionResponse`` (``parts``) for Gemini 3 and as parts
after the results for older models. ``gemini_request`` encodes each history message's
``contents`` once (``entries.py``): a message's translation depends on nothing but the
calls before it, whose names a result looks up (scanning the history when its call was
encoded in an earlier request).
"""

from __future__ import annotations

import json
import mimetypes
from typing import Any, Dict, List, Optional, Tuple

from .base import ModelRequest
from .chat_wire import system_text
from .entries import MARK, EntryBytes, dump

__all__ = ["PARTS_KEY", "PLACEHOLDER_SIGNATURE", "gemini_request", "gemini_body",
           "gemini_contents",
           "gemini_tools", "count_body"]

PARTS_KEY = "gemini_parts"
PLACEHOLDER_SIGNATURE = "skip_thought_signature_validator"
_STUB_KEYS = ("part", "call", "id")  # a stub's own keys, not sent on the part

Calls = Dict[str, Tuple[Any, Optional[str]]]  # tool_use id -> (name, the model's id or None)


def gemini_request(request: ModelRequest, entries: Optional[EntryBytes] = None) -> bytes:
    """The JSON body of ``request``; with ``entries`` (the client's), each history
    message's ``contents`` bytes are encoded once and joined in (``entries.py``)."""
    if entries is None or type(request.messages) is not list:
        return dump(gemini_body(request))
    messages = request.messages
    calls: Calls = {}
    found: List[bool] = []
    nested = nests_media(request.model)

    def translate(message: Dict[str, Any]) -> List[Dict[str, Any]]:
        if message.get("role") != "assistant" and not found and _answers_unseen(
                message, calls):  # a result whose call was encoded earlier: look it up
            found.append(True)
            for earlier in messages:
                if earlier.get("role") == "assistant":
                    _model_parts(earlier, calls)
        return _contents(message, calls, nested)

    return entries.dump(gemini_body(request, contents=MARK), "contents", messages, translate)


def _answers_unseen(message: Dict[str, Any], calls: Calls) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result"
        and b.get("tool_use_id") not in calls for b in content)


def gemini_body(request: ModelRequest, *, contents: Any = None) -> Dict[str, Any]:
    """The JSON body of ``request`` as a dict (the model is in the URL, not the body);
    ``contents`` stands in for the translated history when given.

    ``request.extra`` is merged in: its ``generationConfig`` keys join ours (theirs win),
    its ``tools`` (built-in tools such as ``{"googleSearch": {}}``) follow ours, anything
    else replaces ours."""
    if not request.model:
        raise ValueError("GeminiClient needs ModelRequest.model (the model name)")
    body: Dict[str, Any] = {"contents": gemini_contents(
        request.messages, nested_media=nests_media(request.model))
        if contents is None else contents}
    system = system_text(request.system) if request.system is not None else ""
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        body["tools"] = gemini_tools(request.tools)
    config: Dict[str, Any] = {"maxOutputTokens": request.max_tokens}
    if request.output_format is not None:
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = request.output_format
    body["generationConfig"] = config
    for key, value in request.extra.items():
        if key == "generationConfig" and isinstance(value, dict):
            body[key] = {**config, **value}
        elif key == "tools" and isinstance(value, list):
            body[key] = body.get("tools", []) + value
        else:
            body[key] = value
    return body


def count_body(request: ModelRequest, *, vertex: bool) -> Dict[str, Any]:
    """The ``countTokens`` body: Vertex takes the request's fields as they are; the Gemini
    API wants them as a ``generateContentRequest`` naming the model."""
    body = gemini_body(request)
    body.pop("generationConfig", None)  # countTokens counts no output
    if vertex:
        return body
    return {"generateContentRequest": {"model": f"models/{request.model}", **body}}


def gemini_tools(tools: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Messages tool definitions as one ``functionDeclarations`` tool."""
    declarations = []
    for tool in tools:
        declaration: Dict[str, Any] = {"name": tool.get("name")}
        if tool.get("description"):
            declaration["description"] = tool["description"]
        declaration["parametersJsonSchema"] = tool.get("input_schema") or {
            "type": "object", "properties": {}}
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}]


def nests_media(model: Any) -> bool:
    """Whether ``model`` reads images a tool returned inside its ``functionResponse``
    (``parts``: Gemini 3); older models get them as parts of their own after the results."""
    name = str(model or "")
    return name.startswith("gemini-3") or name.startswith("models/gemini-3")


def gemini_contents(messages: List[Dict[str, Any]], *, nested_media: bool = True
                    ) -> List[Dict[str, Any]]:
    """The history as ``contents``; a message with nothing to send is left out (the API
    refuses a content without parts)."""
    calls: Calls = {}
    return [content for message in messages
            for content in _contents(message, calls, nested_media)]


def _contents(message: Dict[str, Any], calls: Calls, nested: bool = True
              ) -> List[Dict[str, Any]]:
    """One history message as ``contents`` items (none when it has nothing to send)."""
    if message.get("role") == "assistant":
        parts, role = _model_parts(message, calls), "model"
    else:
        parts, role = _user_parts(message.get("content"), calls, nested), "user"
    return [{"role": role, "parts": parts}] if parts else []


# -- model turns ---------------------------------------------------------------------------


def _blocks(content: Any) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or () if isinstance(b, dict)
            and b.get("type") in ("text", "tool_use")]


def _model_parts(message: Dict[str, Any], calls: Calls) -> List[Dict[str, Any]]:
    blocks = _blocks(message.get("content"))
    kept = message.get(PARTS_KEY)
    out: List[Dict[str, Any]] = []
    for entry in kept if isinstance(kept, list) else ():
        if not isinstance(entry, dict):
            continue
        kind = entry.get("part")
        if kind is None:  # a part sent back exactly as it came
            out.append(entry)
            continue
        extra = {k: v for k, v in entry.items() if k not in _STUB_KEYS}
        if kind == "text":
            found = next((b for b in blocks if b["type"] == "text"), None)
            if found is not None:
                blocks.remove(found)
                out.append({"text": found.get("text", ""), **extra})
        elif kind == "functionCall":
            found = next((b for b in blocks if b["type"] == "tool_use"
                          and b.get("id") == entry.get("call")), None)
            if found is not None:
                blocks.remove(found)
                given = entry.get("id") if isinstance(entry.get("id"), str) else None
                out.append({"functionCall": _call(found, given, calls), **extra})
    foreign = not isinstance(kept, list)
    for block in blocks:  # blocks without an entry: another provider's reply, or an edit
        if block["type"] == "text":
            if block.get("text"):
                out.append({"text": block["text"]})
            continue
        part: Dict[str, Any] = {"functionCall": _call(block, None, calls)}
        if foreign:  # Gemini 3 wants a signature on a turn's first call
            part["thoughtSignature"] = PLACEHOLDER_SIGNATURE
            foreign = False
        out.append(part)
    return out


def _call(block: Dict[str, Any], given: Optional[str], calls: Calls) -> Dict[str, Any]:
    calls[block.get("id")] = (block.get("name"), given)  # type: ignore[index]
    args = block.get("input")
    if isinstance(args, str):  # a model's malformed arguments, kept as text
        args = {"arguments": args}
    call: Dict[str, Any] = {"name": block.get("name"), "args": args if args is not None else {}}
    if given:
        call["id"] = given
    return call


# -- user turns ----------------------------------------------------------------------------


def _user_parts(content: Any, calls: Calls, nested: bool) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    out = []
    after: List[Dict[str, Any]] = []  # tool results' media, for a model that cannot nest it
    for block in content or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            response, media = _function_response(block, calls)
            if media and nested:
                response["functionResponse"]["parts"] = media
            elif media:
                after += media
            out.append(response)
        else:
            part = _part(block)
            if part is not None:
                out.append(part)
    return out + after


def _function_response(block: Dict[str, Any], calls: Calls
                       ) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    name, given = calls.get(block.get("tool_use_id"), (None, None))  # type: ignore[arg-type]
    content = block.get("content")
    texts: List[str] = []
    media: List[Dict[str, Any]] = []
    if isinstance(content, list):
        for item in content:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                texts.append(item.get("text", ""))
            else:
                part = _part(item)
                if part is not None and "text" in part:
                    texts.append(part["text"])
                elif part is not None:
                    media.append(part)
    elif content is not None:
        texts.append(content if isinstance(content, str) else json.dumps(content))
    key = "error" if block.get("is_error") else "result"
    response: Dict[str, Any] = {"name": name if isinstance(name, str) else "unknown_tool",
                                "response": {key: "\n".join(texts)}}
    if given:
        response["id"] = given
    return {"functionResponse": response}, media


def _part(block: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    kind = block.get("type")
    if kind == "text":
        return {"text": block.get("text", "")}
    if kind in ("thinking", "redacted_thinking"):
        return None  # another provider's reasoning: Gemini cannot read it
    found = block.get("source")
    source: Dict[str, Any] = found if isinstance(found, dict) else {}
    where = source.get("type")
    if kind in ("image", "document"):
        if where == "base64":
            default = "application/pdf" if kind == "document" else "image/png"
            return {"inlineData": {"mimeType": source.get("media_type") or default,
                                   "data": source.get("data", "")}}
        if where == "text":
            return {"text": source.get("data", "")}
        if where in ("url", "file"):
            uri = source.get("url") if where == "url" else source.get("file_id")
            mime = source.get("media_type") or mimetypes.guess_type(str(uri))[0] or (
                "application/pdf" if kind == "document" else "image/jpeg")
            return {"fileData": {"mimeType": mime, "fileUri": uri}}
    raise ValueError(f"a {kind!r} content block cannot be sent to Gemini (text, images, "
                     "documents and tool results can)")
