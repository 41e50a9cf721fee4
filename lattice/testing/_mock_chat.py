"""The Chat Completions face of ``MockMessagesServer``: the same scripted replies,
rendered as ``chat.completion`` JSON or ``chat.completion.chunk`` SSE.

A reply is first made into a Messages-shaped message by the server (ids, made-up usage),
then translated: text -> ``content``, thinking -> ``reasoning_content``, tool_use ->
``tool_calls`` (arguments as JSON text), stop reason -> ``finish_reason``, usage -> Chat
usage with cache reads as ``prompt_tokens_details.cached_tokens``. Streams send a role
chunk, content and tool-call fragments (id and name in the first fragment of each call),
the finish chunk, a usage chunk with empty ``choices`` when ``stream_options.include_usage``
asks for it, then ``data: [DONE]``.

Faults render in Chat form too. An error's ``type`` that does not end in ``_error`` is an
OpenAI error ``code`` (``MockMessagesServer.error(400, "...", type="context_length_exceeded")``
-> ``{"error": {"message", "type": "invalid_request_error", "code":
"context_length_exceeded"}}``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from ._mock_script import Fault

if TYPE_CHECKING:  # pragma: no cover
    from .mock_server import _Handler

__all__ = ["CHAT_PATHS", "answer_chat", "answer_fault", "completion_from_message",
           "completion_chunks", "messages_view", "refuse_chat", "write_json"]

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
           "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop"}
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 429: "rate_limit_error"}


def completion_from_message(message: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``chat.completion`` object for a Messages-shaped ``message``."""
    texts, thinking, calls = [], [], []
    for block in message.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            thinking.append(block.get("thinking", ""))
        elif kind == "tool_use":
            calls.append({"id": block.get("id"), "type": "function", "function": {
                "name": block.get("name"), "arguments": json.dumps(block.get("input", {}))}})
    reply: Dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if thinking:
        reply["reasoning_content"] = "".join(thinking)
    if calls:
        reply["tool_calls"] = calls
    stop = message.get("stop_reason")
    usage = message.get("usage") or {}
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + (
        usage.get("cache_creation_input_tokens") or 0)
    output = usage.get("output_tokens") or 0
    return {
        "id": "chatcmpl-" + str(message.get("id", "mock")).replace("msg_", ""),
        "object": "chat.completion", "created": 0, "model": message.get("model"),
        "choices": [{"index": 0, "message": reply, "logprobs": None,
                     "finish_reason": _FINISH.get(stop, stop) if stop else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output,
                  "total_tokens": prompt + output,
                  "prompt_tokens_details": {"cached_tokens": cached}},
    }


def messages_view(body: Mapping[str, Any]) -> Dict[str, Any]:
    """A chat request body in Messages shape, for scripts written against the Messages
    API: system message -> ``system``, tool messages -> ``tool_result`` blocks, tool calls
    -> ``tool_use`` blocks, function tools -> ``{"name", "description", "input_schema"}``."""
    view = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    messages: List[Dict[str, Any]] = []
    for message in body.get("messages") or ():
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            view["system"] = content
        elif role == "assistant":
            messages.append({"role": "assistant", "content": _assistant_blocks(message)})
        elif role == "tool":  # consecutive tool messages: one user message of results
            result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                      "content": content}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "user" and isinstance(
                    last["content"], list) and all(
                    b.get("type") == "tool_result" for b in last["content"]):
                last["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        else:
            messages.append({"role": "user", "content": content if isinstance(content, str)
                             else _user_blocks(content)})
    view["messages"] = messages
    view["tools"] = [{"name": t["function"].get("name"),
                      "description": t["function"].get("description", ""),
                      "input_schema": t["function"].get("parameters", {})}
                     for t in body.get("tools") or () if isinstance(t.get("function"), dict)]
    return view


def _assistant_blocks(message: Mapping[str, Any]) -> List[Dict[str, Any]]:
    blocks: List[Dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call["function"].get("arguments") or "{}")
        except ValueError:
            arguments = call["function"].get("arguments")
        blocks.append({"type": "tool_use", "id": call.get("id"),
                       "name": call["function"].get("name"), "input": arguments})
    return blocks


def _user_blocks(content: Any) -> List[Dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content or ():
        if part.get("type") == "image_url":
            url = part["image_url"]["url"]
            blocks.append({"type": "image", "source": {"type": "url", "url": url}})
        else:
            blocks.append(part)
    return blocks


def _pieces(text: str) -> List[str]:
    size = max(1, min(256, -(-len(text) // 3)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion_chunks(completion: Mapping[str, Any], *, usage: bool = True
                      ) -> List[Dict[str, Any]]:
    """The ``chat.completion.chunk`` dicts a server would stream for ``completion``."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {"id": completion["id"], "object": "chat.completion.chunk", "created": 0,
            "model": completion["model"]}

    def chunk(delta: Dict[str, Any], finish: Optional[str] = None) -> Dict[str, Any]:
        return dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                    "finish_reason": finish}])

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": p})
               for p in _pieces(message.get("reasoning_content") or "")]
    chunks += [chunk({"content": p}) for p in _pieces(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call["id"],
                                             "type": "function", "function": {
                                                 "name": function["name"], "arguments": ""}}]}))
        chunks += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                   for p in _pieces(function["arguments"])]
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append(dict(head, choices=[], usage=completion["usage"]))
    return chunks


def _sse(chunks: List[Dict[str, Any]]) -> bytes:
    return b"".join(b"data: %s\n\n" % json.dumps(c).encode() for c in chunks)


def _error_body(fault: Fault) -> Dict[str, Any]:
    kind = fault.error_type
    code = None
    if kind and not kind.endswith("_error"):
        kind, code = None, kind
    return {"error": {"message": fault.message,
                      "type": kind or _TYPES.get(fault.status, "api_error"),
                      "param": None, "code": code}}


def answer_chat(handler: _Handler, reply: Any, body: Dict[str, Any], size: int,
                stream: bool) -> None:
    """Answer one chat request with ``reply`` (a scripted reply or a fault)."""
    mock = handler.server.mock
    while isinstance(reply, Fault) and reply.kind == "delay":
        mock._closing.wait(reply.seconds)
        reply = reply.reply
    if isinstance(reply, Fault):
        def events(scripted: Any) -> List[bytes]:
            message = mock._message(scripted, body, size)
            return [_sse([c]) for c in completion_chunks(completion_from_message(message))]

        error = {"message": reply.message, "type": reply.error_type, "code": None}
        answer_fault(handler, reply, events, lambda count: _sse([{"error": error}]))
        return
    completion = completion_from_message(mock._message(reply, body, size))
    if stream:
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        data = _sse(completion_chunks(completion, usage=usage)) + b"data: [DONE]\n\n"
        handler._stream(data, None, "x-request-id")
    else:
        write_json(handler, 200, json.dumps(completion).encode())


def answer_fault(handler: _Handler, fault: Fault, events: Callable[[Any], List[bytes]],
                 error_event: Callable[[int], bytes]) -> None:
    """Write a scripted fault (a delay is the caller's) as both OpenAI APIs do: an error in
    OpenAI's shape, raw SSE, a hang, or the first events of a stream (``events(reply)``:
    each event's SSE bytes) then a cut, a hang, keep-alives, or ``error_event(count)``."""
    mock = handler.server.mock
    if fault.kind == "error":
        write_json(handler, fault.status, json.dumps(_error_body(fault)).encode(),
                   fault.headers)
    elif fault.kind == "raw_sse":
        handler._stream(fault.text.encode("utf-8"), fault.chunk_size, "x-request-id")
    elif fault.kind == "hang" and fault.after_events is None:
        mock._closing.wait()
        handler.close_connection = True
    else:  # hang, cut, stream_error, trickle: part of a stream first (trickle: no reply)
        sent = events(mock.DEFAULT_TEXT if fault.reply is None else fault.reply)
        handler._start_stream("x-request-id")
        count = 1 if fault.after_events is None else fault.after_events
        handler._chunk(b"".join(sent[:count]))
        if fault.kind == "stream_error":
            handler._chunk(error_event(count))
            handler._end_stream()
            return
        if fault.kind == "trickle":
            while not mock._closing.wait(fault.seconds):
                handler._chunk(b": keep-alive\n\n")
        elif fault.kind == "hang":
            mock._closing.wait()
        handler.close_connection = True  # "cut": drop it without the closing chunk


def refuse_chat(handler: _Handler, problem: Tuple[str, str, Optional[str]]) -> None:
    """A 400 ``invalid_request_error`` in OpenAI's error shape, for a request the real
    API refuses (``_mock_checks.chat_request_problem``)."""
    message, param, code = problem
    body = {"error": {"message": message, "type": "invalid_request_error",
                      "param": param or None, "code": code}}
    write_json(handler, 400, json.dumps(body).encode())


def write_json(handler: _Handler, status: int, data: bytes,
               headers: Mapping[str, str] = {}) -> None:
    """A JSON body as OpenAI sends it (request id in ``x-request-id``)."""
    handler._write_json(status, data, {"x-request-id": handler._request_id()}, headers)
