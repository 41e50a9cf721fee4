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
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from .mock_server import Fault, _Handler

__all__ = ["CHAT_PATHS", "answer_chat", "completion_from_message", "completion_chunks",
           "messages_view", "refuse_chat"]

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
    from .mock_server import Fault

    mock = handler.server.mock
    if not isinstance(reply, Fault):
        completion = completion_from_message(mock._message(reply, body, size))
        if stream:
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            data = _sse(completion_chunks(completion, usage=usage)) + b"data: [DONE]\n\n"
            _stream(handler, data)
        else:
            _write(handler, 200, "application/json", json.dumps(completion).encode())
        return
    if reply.kind == "error":
        _write(handler, reply.status, "application/json",
               json.dumps(_error_body(reply)).encode(), reply.headers)
    elif reply.kind == "delay":
        mock._closing.wait(reply.seconds)
        answer_chat(handler, reply.reply, body, size, stream)
    elif reply.kind == "raw_sse":
        _stream(handler, reply.text.encode("utf-8"), reply.chunk_size)
    elif reply.kind == "hang" and reply.after_events is None:
        mock._closing.wait()
        handler.close_connection = True
    else:  # hang, cut, stream_error, trickle: part of a stream first
        scripted = mock.DEFAULT_TEXT if reply.reply is None else reply.reply  # trickle: none
        chunks = completion_chunks(completion_from_message(mock._message(scripted, body, size)))
        _start(handler)
        count = 1 if reply.after_events is None else reply.after_events
        _chunk(handler, _sse(chunks[:count]))
        if reply.kind == "stream_error":
            error = {"message": reply.message, "type": reply.error_type, "code": None}
            _chunk(handler, _sse([{"error": error}]))
            handler.wfile.write(b"0\r\n\r\n")
            return
        if reply.kind == "trickle":
            while not mock._closing.wait(reply.seconds):
                _chunk(handler, b": keep-alive\n\n")
        elif reply.kind == "hang":
            mock._closing.wait()
        handler.close_connection = True  # "cut": drop it without the closing chunk


def refuse_chat(handler: _Handler, problem: Tuple[str, str, Optional[str]]) -> None:
    """A 400 ``invalid_request_error`` in OpenAI's error shape, for a request the real
    API refuses (``_mock_checks.chat_request_problem``)."""
    message, param, code = problem
    body = {"error": {"message": message, "type": "invalid_request_error",
                      "param": param or None, "code": code}}
    _write(handler, 400, "application/json", json.dumps(body).encode())


def _request_id(handler: _Handler) -> str:
    return f"req_mock_{next(handler.server.mock._ids):06d}"


def _write(handler: _Handler, status: int, ctype: str, data: bytes,
           headers: Mapping[str, str] = {}) -> None:
    handler.send_response_only(status)
    handler.send_header("content-type", ctype)
    handler.send_header("content-length", str(len(data)))
    handler.send_header("x-request-id", _request_id(handler))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def _start(handler: _Handler) -> None:
    handler.send_response_only(200)
    handler.send_header("content-type", "text/event-stream; charset=utf-8")
    handler.send_header("transfer-encoding", "chunked")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("x-request-id", _request_id(handler))
    handler.end_headers()


def _chunk(handler: _Handler, data: bytes) -> None:
    if data:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()


def _stream(handler: _Handler, data: bytes, chunk_size: Optional[int] = None) -> None:
    _start(handler)
    step = chunk_size or len(data) or 1
    for i in range(0, len(data), step):
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data[i : i + step]), data[i : i + step]))
        if chunk_size:
            handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")
