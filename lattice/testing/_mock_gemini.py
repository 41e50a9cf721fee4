"""The Gemini faces of ``MockMessagesServer``: the Gemini API and Vertex AI routes.

Routes (``serve``): ``POST /v1beta/models/{m}:generateContent``, ``:streamGenerateContent``
(``?alt=sse``: SSE ``data:`` events framed with CRLF, as Google sends them; without it one
JSON array of chunks) and ``:countTokens``, wanting an ``x-goog-api-key`` header (the
server's ``gemini_key`` when set, else any); the same three under
``/{v1|v1beta1}/projects/{p}/locations/{r}/publishers/google/models/{m}`` wanting
``Authorization: Bearer`` (the server's ``vertex_token`` when set, else any). A request
Google would refuse (``_mock_gemini_checks``) gets Google's 400, not recorded and no
reply used, unless the server was made with ``strict=False``.

Scripted replies are rendered as a ``GenerateContentResponse``: text blocks as text
parts, thinking as ``thought: true`` parts, tool_use blocks as ``functionCall`` parts
(without ids, as the Gemini API sends them); a ``gemini-3*`` model signs each reply's first
function call with a ``thoughtSignature`` the next requests must send back. A stream
sends the text in a few chunks, the last with ``finishReason`` and ``usageMetadata``.
``stop_reason`` ``max_tokens`` is ``MAX_TOKENS``, ``refusal`` ``SAFETY``,
``malformed_function_call`` ``MALFORMED_FUNCTION_CALL``. A callable reply sees the request
in Messages shape (``messages``, ``system``, ``tools``, ``model``). Faults: an error has
Google's body (``error.status`` named from the HTTP status, or the fault's ``type``);
``stream_error`` sends an ``error`` object as an event.
"""

from __future__ import annotations

import base64
import json
import re
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional

from ._mock_chat import answer_fault
from ._mock_gemini_checks import camel_name, gemini_problem
from ._mock_script import Fault

if TYPE_CHECKING:  # pragma: no cover
    from .mock_server import _Handler

__all__ = ["serve", "gemini_response", "gemini_chunks", "gemini_view", "GOOGLE_STATUS"]

_STUDIO = re.compile(r"^/v1beta/models/([^/:]+):(generateContent|streamGenerateContent|"
                     r"countTokens)$")
_VERTEX = re.compile(r"^/(?:v1|v1beta1)/projects/[^/]+/locations/[^/]+/publishers/google/"
                     r"models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED",
                 499: "CANCELLED", 500: "INTERNAL", 503: "UNAVAILABLE",
                 504: "DEADLINE_EXCEEDED"}
_FINISH = {"end_turn": "STOP", "tool_use": "STOP", "stop_sequence": "STOP",
           "max_tokens": "MAX_TOKENS", "refusal": "SAFETY",
           "malformed_function_call": "MALFORMED_FUNCTION_CALL"}


def serve(handler: _Handler, raw: bytes) -> bool:
    """Answer the request if its path is one of ours; False when it is not."""
    path, _, query = handler.path.partition("?")
    studio, vertex = _STUDIO.match(path), _VERTEX.match(path)
    route = studio or vertex
    if route is None:
        return False
    mock = handler.server.mock
    model, method = route.group(1), route.group(2)
    headers = {k.lower(): v for k, v in handler.headers.items()}
    if studio is not None:
        key = headers.get("x-goog-api-key", "")
        if not key or (mock.gemini_key is not None and key != mock.gemini_key):
            _google_error(handler, 400, "API key not valid. Please pass a valid API key.",
                          details=[{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                    "reason": "API_KEY_INVALID", "domain": "googleapis.com"}])
            return True
    else:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip() or (
                mock.vertex_token is not None and token.strip() != mock.vertex_token):
            _google_error(handler, 401, "Request had invalid authentication credentials. "
                          "Expected OAuth 2 access token, login cookie or other valid "
                          "authentication credential.")
            return True
    try:
        body = json.loads(raw)
    except ValueError:
        _google_error(handler, 400, "Invalid JSON payload received.")
        return True
    if method == "countTokens":
        _count(handler, body, studio is not None)
        return True
    with mock._lock:
        issued = set(mock._gemini_signatures)
    problem = gemini_problem(body, model, issued) if mock.strict else None
    if problem is not None:  # refused as Google would: not recorded, no reply used
        _google_error(handler, problem[0], problem[1], status_name=problem[2])
        return True
    reply = mock._take(body, headers, gemini_view(body, model))
    stream = method == "streamGenerateContent" if mock.stream is None else mock.stream
    sse = "alt=sse" in query or mock.stream is True
    _answer(handler, reply, body, model, len(raw), stream, sse)
    return True


def _count(handler: _Handler, body: Any, studio: bool) -> None:
    inner = body.get("generateContentRequest", body) if isinstance(body, dict) else None
    if not isinstance(inner, dict) or (studio and "generateContentRequest" not in body
                                       and set(body) - {"contents"}):
        _google_error(handler, 400, "Invalid JSON payload received. Unknown name "
                      f"{sorted(set(body or {}) - {'contents'})[:1]} at '': Cannot find "
                      "field.")
        return
    handler._write_json(200, json.dumps({"totalTokens": max(
        1, len(json.dumps(inner)) // 4)}).encode())


def _google_error(handler: _Handler, status: int, message: str, *,
                  status_name: Optional[str] = None, details: Optional[List[Any]] = None,
                  headers: Mapping[str, str] = {}) -> None:
    error = {"code": status, "message": message,
             "status": status_name or GOOGLE_STATUS.get(status, "UNKNOWN")}
    if details:
        error["details"] = details
    handler._write_json(status, json.dumps({"error": error}).encode(), headers)


def gemini_view(body: Mapping[str, Any], model: str) -> Dict[str, Any]:
    """A Gemini request in Messages shape, for scripts written against the Messages API."""
    def get(value: Mapping[str, Any], name: str) -> Any:
        return next((v for k, v in value.items() if camel_name(k) == name), None)

    messages: List[Dict[str, Any]] = []
    for content in get(body, "contents") or ():
        blocks: List[Dict[str, Any]] = []
        for part in content.get("parts") or ():
            call, result = get(part, "functionCall"), get(part, "functionResponse")
            if call is not None:
                blocks.append({"type": "tool_use", "id": call.get("id") or call.get("name"),
                               "name": call.get("name"), "input": call.get("args") or {}})
            elif result is not None:
                response = result.get("response") or {}
                error = "error" in response
                blocks.append({"type": "tool_result",
                               "tool_use_id": result.get("id") or result.get("name"),
                               "content": str(response.get("error" if error else "result",
                                                           json.dumps(response))),
                               **({"is_error": True} if error else {})})
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                blocks.append({"type": "text", "text": part["text"]})
        role = "assistant" if content.get("role") == "model" else "user"
        text_only = role == "user" and blocks and all(b["type"] == "text" for b in blocks)
        messages.append({"role": role, "content": "".join(b["text"] for b in blocks)
                         if text_only else blocks})
    system = get(body, "systemInstruction")
    tools = [{"name": d.get("name"), "description": d.get("description", ""),
              "input_schema": get(d, "parametersJsonSchema") or d.get("parameters") or {}}
             for tool in get(body, "tools") or ()
             for d in get(tool, "functionDeclarations") or ()]
    return {"model": model, "messages": messages, "tools": tools,
            "system": "".join(p.get("text", "") for p in system.get("parts") or ())
            if isinstance(system, dict) else None}


def gemini_response(message: Mapping[str, Any], model: str, sign: Any) -> Dict[str, Any]:
    """A Messages-shaped ``message`` (the mock's) as a ``GenerateContentResponse``;
    ``sign(name)`` makes the signature of a gemini-3 model's first function call."""
    parts: List[Dict[str, Any]] = []
    signed = False
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            parts.append({"text": block.get("text", "")})
        elif kind == "thinking":
            parts.append({"text": block.get("thinking", ""), "thought": True})
        elif kind == "tool_use":
            part: Dict[str, Any] = {"functionCall": {"name": block.get("name"),
                                                     "args": block.get("input") or {}}}
            if model.startswith("gemini-3") and not signed:
                part["thoughtSignature"] = sign(block.get("name"))
                signed = True
            parts.append(part)
    usage = message.get("usage") or {}
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached
    output = usage.get("output_tokens") or 0
    meta = {"promptTokenCount": prompt, "candidatesTokenCount": output,
            "totalTokenCount": prompt + output}
    if cached:
        meta["cachedContentTokenCount"] = cached
    stop = message.get("stop_reason") or "end_turn"
    return {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": _FINISH.get(stop, "STOP"), "index": 0}],
            "usageMetadata": meta, "modelVersion": message.get("model") or model,
            "responseId": str(message.get("id", "mock")).replace("msg_", "resp_")}


def gemini_chunks(response: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """A whole response as the chunks a stream sends: text parts cut in pieces, each other
    part in a chunk of its own, ``finishReason`` and usage on the last one."""
    candidate = response["candidates"][0]
    pieces: List[Dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        text = part.get("text")
        if isinstance(text, str) and len(text) > 3 and set(part) <= {"text", "thought"}:
            size = -(-len(text) // 3)
            pieces += [dict(part, text=text[i : i + size]) for i in range(0, len(text), size)]
        else:
            pieces.append(part)
    head = {"modelVersion": response["modelVersion"], "responseId": response["responseId"]}
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}],
               **head} for p in pieces] or [{"candidates": [
                   {"content": {"role": "model", "parts": []}, "index": 0}], **head}]
    chunks[-1]["candidates"][0]["finishReason"] = candidate["finishReason"]
    chunks[-1]["usageMetadata"] = response["usageMetadata"]
    return chunks


def _sse(chunks: List[Dict[str, Any]]) -> bytes:
    return b"".join(b"data: %s\r\n\r\n" % json.dumps(c).encode() for c in chunks)


def _answer(handler: _Handler, reply: Any, body: Dict[str, Any], model: str, size: int,
            stream: bool, sse: bool) -> None:
    mock = handler.server.mock

    def render(scripted: Any) -> Dict[str, Any]:
        message = mock._message(scripted, {"model": model, **body}, size)
        return gemini_response(message, model, lambda name: _sign(mock, name))

    while isinstance(reply, Fault) and reply.kind == "delay":
        mock._closing.wait(reply.seconds)
        reply = reply.reply
    if isinstance(reply, Fault) and reply.kind == "error":
        name = reply.error_type if reply.error_type and reply.error_type.isupper() else None
        _google_error(handler, reply.status, reply.message, status_name=name,
                      headers=reply.headers)
        return
    if isinstance(reply, Fault):
        def events(scripted: Any) -> List[bytes]:
            return [_sse([c]) for c in gemini_chunks(render(scripted))]

        error = {"code": 500, "message": reply.message, "status": "INTERNAL"}
        answer_fault(handler, reply, events, lambda count: _sse([{"error": error}]))
        return
    response = render(reply)
    if stream and sse:
        handler._stream(_sse(gemini_chunks(response)), None, "x-request-id")
    elif stream:
        handler._write_json(200, json.dumps(gemini_chunks(response)).encode())
    else:
        handler._write_json(200, json.dumps(response).encode())


def _sign(mock: Any, name: Any) -> str:
    """A signature the mock will recognise when it comes back."""
    with mock._lock:
        number = next(mock._ids)
        signature = base64.b64encode(f"mock-signature/{name}/{number}".encode()).decode()
        mock._gemini_signatures.add(signature)
    return signature
