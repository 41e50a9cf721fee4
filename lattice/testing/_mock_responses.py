"""The Responses API and Azure OpenAI faces of ``MockMessagesServer``.

Routes (``serve``): ``POST /v1/responses`` (and ``/responses``),
``/v1/responses/input_tokens`` (a token count); Azure's
``/openai/v1/responses``, ``/openai/responses?api-version=...`` and
``/openai/deployments/{deployment}/chat/completions?api-version=...``. Azure routes want
an ``api-key`` header (the server's ``azure_api_key`` when set, else any) or
``Authorization: Bearer`` (else 401) and, but for the v1 route,
an ``api-version`` (else 404). A Responses request the real API would refuse gets its
error (``_mock_responses_checks``; not recorded, no reply used up) unless the server was
made with ``strict=False``.

The same scripted replies are rendered as a ``response`` object: thinking blocks become
``reasoning`` items (summary text; ``encrypted_content`` when the request's ``include``
asks for it), text a ``message`` item, tool_use a ``function_call`` item; stop reason
``max_tokens`` is ``status: "incomplete"`` (``max_output_tokens``); usage counts cache
reads as ``cached_tokens`` and thinking as ``reasoning_tokens``. Streams send what the
API does: ``response.created``, ``response.in_progress``, per item ``output_item.added``,
its part and delta events and ``output_item.done``, then ``response.completed`` (or
``response.incomplete``). Faults: an error has an OpenAI error body; ``stream_error``
sends an ``error`` event (the Anthropic error type as an OpenAI code).
"""

from __future__ import annotations

import hmac
import json
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional
from urllib.parse import parse_qs

from ._mock_chat import answer_chat, answer_fault, messages_view, refuse_chat, write_json
from ._mock_checks import chat_request_problem
from ._mock_responses_checks import encrypt, responses_problem, responses_view
from ._mock_script import Fault

if TYPE_CHECKING:  # pragma: no cover
    from .mock_server import _Handler

__all__ = ["serve", "response_from_message", "response_events"]

RESPONSES_PATHS = ("/v1/responses", "/responses")
AZURE_RESPONSES_PATHS = ("/openai/v1/responses", "/openai/responses")
COUNT_PATHS = ("/v1/responses/input_tokens", "/responses/input_tokens")
_CODES = {"overloaded_error": "server_error", "api_error": "server_error",
          "rate_limit_error": "rate_limit_exceeded", "invalid_request_error": "invalid_prompt"}


def serve(handler: _Handler, raw: bytes) -> bool:
    """Answer the request if its path is one of ours; False when it is not."""
    path, _, query = handler.path.partition("?")
    path = path.rstrip("/")
    azure_chat = path.startswith("/openai/deployments/") and path.endswith("/chat/completions")
    azure = azure_chat or path in AZURE_RESPONSES_PATHS
    if path in COUNT_PATHS:
        _count(handler, raw)
        return True
    if path not in RESPONSES_PATHS and not azure:
        return False
    headers = {k.lower(): v for k, v in handler.headers.items()}
    if azure:
        problem = _azure_problem(path, headers, parse_qs(query),
                                 handler.server.mock.azure_api_key)
        if problem is not None:
            _error(handler, problem[0], problem[1], code=str(problem[0]))
            return True
    try:
        body = json.loads(raw)
    except ValueError:
        _error(handler, 400, "We could not parse the JSON body of your request.")
        return True
    mock = handler.server.mock
    if azure_chat:
        refused = chat_request_problem(body) if mock.strict else None
        if refused is not None:
            refuse_chat(handler, refused)
            return True
        reply = mock._take(body, headers, messages_view(body))
        stream = body.get("stream") is True if mock.stream is None else mock.stream
        answer_chat(handler, reply, body, len(raw), stream)
        return True
    found = responses_problem(body) if mock.strict else None
    if found is not None:  # refused as the real API would: not recorded, no reply used
        _error(handler, found[0], found[1], param=found[2], code=found[3])
        return True
    reply = mock._take(body, headers, responses_view(body))
    stream = body.get("stream") is True if mock.stream is None else mock.stream
    answer(handler, reply, body, len(raw), stream)
    return True


def _count(handler: _Handler, raw: bytes) -> None:
    """``/responses/input_tokens``: 1 token per 4 characters of the JSON of input,
    instructions and tools; a body with what the endpoint refuses gets a 400."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        _error(handler, 400, "Missing required parameter: 'model'.", param="model",
               code="missing_required_parameter")
        return
    refused = sorted(set(body) & {"max_output_tokens", "stream", "store", "include"})
    if refused and handler.server.mock.strict:
        _error(handler, 400, f"Unknown parameter: '{refused[0]}'.", param=refused[0],
               code="unknown_parameter")
        return
    counted = {k: body[k] for k in ("instructions", "input", "tools") if k in body}
    text = json.dumps(counted, ensure_ascii=False, separators=(",", ":"))
    write_json(handler, 200, json.dumps({"object": "response.input_tokens",
                                         "input_tokens": max(1, len(text) // 4)}).encode())


def _azure_problem(path: str, headers: Mapping[str, str], query: Dict[str, List[str]],
                   expected: Optional[str]) -> Optional[tuple]:  # type: ignore[type-arg]
    bearer = headers.get("authorization", "")
    key = headers.get("api-key")
    wrong = key is not None and expected is not None and not hmac.compare_digest(
        key.encode("utf-8"), expected.encode("utf-8"))
    if wrong or (not key and not (bearer.startswith("Bearer ") and bearer[7:].strip())):
        return (401, "Access denied due to invalid subscription key or wrong API endpoint. "
                "Make sure to provide a valid key for an active subscription and use a "
                "correct regional API endpoint for your resource.")
    if path != "/openai/v1/responses" and not (query.get("api-version") or [""])[0]:
        return 404, "Resource not found"
    return None


def _error(handler: _Handler, status: int, message: str, *, param: Optional[str] = None,
           code: Optional[str] = None, headers: Mapping[str, str] = {}) -> None:
    kind = {400: "invalid_request_error", 401: "invalid_request_error",
            404: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    write_json(handler, status, json.dumps(body).encode(), headers)


# -- rendering -----------------------------------------------------------------------------


def response_from_message(message: Mapping[str, Any], body: Mapping[str, Any]
                          ) -> Dict[str, Any]:
    """The ``response`` object for a Messages-shaped ``message`` answering ``body``."""
    encrypted = "reasoning.encrypted_content" in (body.get("include") or ())
    base = str(message.get("id", "mock")).replace("msg_", "")
    output: List[Dict[str, Any]] = []
    reasoning = 0
    for n, block in enumerate(message.get("content") or ()):
        kind = block.get("type")
        if kind == "thinking":
            item_id = f"rs_{base}_{n}"
            reasoning += max(1, len(block.get("thinking", "")) // 4)
            output.append({"id": item_id, "type": "reasoning", "summary": [
                {"type": "summary_text", "text": block.get("thinking", "")}],
                "encrypted_content": encrypt(item_id) if encrypted else None})
        elif kind == "text":
            output.append({"id": f"msg_{base}_{n}", "type": "message", "status": "completed",
                           "role": "assistant", "content": [{
                               "type": "output_text", "text": block.get("text", ""),
                               "annotations": [], "logprobs": []}]})
        elif kind == "tool_use":
            output.append({"id": f"fc_{base}_{n}", "type": "function_call",
                           "status": "completed", "call_id": block.get("id"),
                           "name": block.get("name"),
                           "arguments": json.dumps(block.get("input", {}))})
    stop = message.get("stop_reason")
    if stop == "refusal" and output and output[-1]["type"] == "message":
        text = output[-1]["content"][0]["text"]
        output[-1]["content"] = [{"type": "refusal", "refusal": text}]
    usage = message.get("usage") or {}
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + (
        usage.get("cache_creation_input_tokens") or 0)
    out = (usage.get("output_tokens") or 0) + reasoning
    incomplete = stop == "max_tokens"
    return {
        "id": f"resp_{base}", "object": "response", "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed", "background": False,
        "error": None, "incomplete_details": {"reason": "max_output_tokens"}
        if incomplete else None, "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"), "model": message.get("model"),
        "output": output, "parallel_tool_calls": True, "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None}, "store": body.get("store", True),
        "temperature": 1.0, "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": "auto", "tools": body.get("tools") or [], "top_p": 1.0,
        "truncation": "disabled", "metadata": {}, "user": None,
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                  "output_tokens": out, "output_tokens_details": {"reasoning_tokens": reasoning},
                  "total_tokens": prompt + out},
    }


def _pieces(text: str) -> List[str]:
    size = max(1, min(256, -(-len(text) // 3)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _item_events(n: int, item: Dict[str, Any]) -> List[Dict[str, Any]]:
    kind = item["type"]
    start = dict(item, status="in_progress")
    events: List[Dict[str, Any]] = []
    if kind == "message":
        start["content"] = []
        for c, part in enumerate(item["content"]):
            at = {"item_id": item["id"], "output_index": n, "content_index": c}
            name, key = ("refusal", "refusal") if part["type"] == "refusal" else \
                ("output_text", "text")
            events.append(dict(at, type="response.content_part.added",
                               part=dict(part, **{key: ""})))
            events += [dict(at, type=f"response.{name}.delta", delta=p)
                       for p in _pieces(part[key])]
            events.append(dict(at, type=f"response.{name}.done", **{key: part[key]}))
            events.append(dict(at, type="response.content_part.done", part=part))
    elif kind == "function_call":
        start["arguments"] = ""
        at = {"item_id": item["id"], "output_index": n}
        events += [dict(at, type="response.function_call_arguments.delta", delta=p)
                   for p in _pieces(item["arguments"])]
        events.append(dict(at, type="response.function_call_arguments.done",
                           arguments=item["arguments"]))
    elif kind == "reasoning":
        start["summary"] = []
        for s, part in enumerate(item["summary"]):
            at = {"item_id": item["id"], "output_index": n, "summary_index": s}
            events.append(dict(at, type="response.reasoning_summary_part.added",
                               part=dict(part, text="")))
            events += [dict(at, type="response.reasoning_summary_text.delta", delta=p)
                       for p in _pieces(part["text"])]
            events.append(dict(at, type="response.reasoning_summary_text.done",
                               text=part["text"]))
            events.append(dict(at, type="response.reasoning_summary_part.done", part=part))
    return ([{"type": "response.output_item.added", "output_index": n, "item": start}]
            + events + [{"type": "response.output_item.done", "output_index": n, "item": item}])


def response_events(response: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The SSE event dicts the Responses API would stream for ``response``."""
    head = dict(response, status="in_progress", output=[], usage=None,
                incomplete_details=None)
    events: List[Dict[str, Any]] = [{"type": "response.created", "response": head},
                                    {"type": "response.in_progress", "response": head}]
    for n, item in enumerate(response["output"]):
        events += _item_events(n, item)
    final = "response.incomplete" if response["status"] == "incomplete" else \
        "response.completed"
    events.append({"type": final, "response": dict(response)})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def _sse(events: List[Dict[str, Any]]) -> bytes:
    return b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), json.dumps(e).encode())
                    for e in events)


def answer(handler: _Handler, reply: Any, body: Dict[str, Any], size: int,
           stream: bool) -> None:
    """Answer one Responses request with ``reply`` (a scripted reply or a fault)."""
    mock = handler.server.mock
    while isinstance(reply, Fault) and reply.kind == "delay":
        mock._closing.wait(reply.seconds)
        reply = reply.reply
    if isinstance(reply, Fault):
        def events(scripted: Any) -> List[bytes]:
            message = mock._message(scripted, body, size)
            return [_sse([e]) for e in response_events(response_from_message(message, body))]

        fault = reply
        code = _CODES.get(fault.error_type or "", fault.error_type)
        answer_fault(handler, fault, events, lambda count: _sse([{
            "type": "error", "code": code, "message": fault.message, "param": None,
            "sequence_number": count}]))
        return
    response = response_from_message(mock._message(reply, body, size), body)
    if stream:
        handler._stream(_sse(response_events(response)), None, "x-request-id")
    else:
        write_json(handler, 200, json.dumps(response).encode())
