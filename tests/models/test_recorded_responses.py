"""Replay real recorded Responses API traffic (../shared) through OpenAIResponsesClient.

``recorded-openai-responses-traffic`` holds 270 ``POST /v1/responses`` interactions (see its
SOURCES.md). For each one the recorded request is turned into a lattice history (worked
out here, without the client's code): user messages, assistant text and ``function_call``
items as ``tool_use`` blocks, ``function_call_output`` items as ``tool_result`` blocks, the
output items a history has no block for (reasoning, built-in tool calls, compaction,
developer messages between turns) in the assistant message's ``openai_items``, with stubs
carrying the ids of the messages and calls. The client sends it to a ``responses`` mock,
and the test checks that

* the ``input`` it sent is the recorded conversation (item for item, in order: texts,
  images and files, call ids, names and arguments, outputs, reasoning items with their
  encrypted content, ids, phases), its ``instructions`` the recorded system prompt, its
  function tools the recorded ones with ``strict`` explicit;
* the reply it parsed matches the recorded one: text, every tool call's id, name and
  arguments, reasoning summaries, stop reason, usage (cached and reasoning tokens), id
  and model; recorded errors (HTTP 400s, ``response.failed``) raise the right class.

Nothing is skipped (what the history cannot hold is carried verbatim and compared too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit

import pytest
import responses
from helpers import SHARED

from lattice.errors import APIConnectionError, APIStatusError, BadRequestError
from lattice.models.base import ModelRequest
from lattice.models.responses import OpenAIResponsesClient

DATA = SHARED / "data" / "recorded-openai-responses-traffic"
KEY = "sk-replay-0123456789abcdef"


@dataclass
class Case:
    name: str
    interaction: Dict[str, Any]


def _cases() -> List[Any]:
    if not DATA.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared data absent"))]
    cases = []
    for path in sorted(DATA.glob("**/*.json")):
        name = path.relative_to(DATA).with_suffix("").as_posix()
        for item in json.loads(path.read_text("utf-8"))["interactions"]:
            cases.append(Case(f"{name}#{item['index']}", item))
    return cases


CASES = _cases()


# -- the recorded request as a lattice history ---------------------------------------------


def _input(arguments: Any) -> Any:
    if arguments in (None, ""):
        return {}
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _block(part: Dict[str, Any]) -> Dict[str, Any]:
    kind = part["type"]
    if kind == "input_text":
        return {"type": "text", "text": part["text"]}
    if "file_id" in part:
        return {"type": "image" if kind == "input_image" else "document",
                "source": {"type": "file", "file_id": part["file_id"]}}
    url = part.get("image_url") or part.get("file_url") or part.get("file_data")
    if url.startswith("data:"):
        media, _, data = url[5:].partition(";base64,")
        source = {"type": "base64", "media_type": media, "data": data}
    else:
        source = {"type": "url", "url": url}
    if kind == "input_image":
        return {"type": "image", "source": source}
    return {"type": "document", "source": source,
            **({"title": part["filename"]} if "filename" in part else {})}


def _content(content: Any) -> Any:
    return content if isinstance(content, str) else [_block(p) for p in content]


def history_of(body: Dict[str, Any]) -> Tuple[Any, List[Dict[str, Any]]]:
    """(system, messages) for a recorded request body."""
    items = body["input"]
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items)
    system = body.get("instructions")
    if system is None and items and items[0].get("role") == "system":
        system = items.pop(0)["content"]
    messages: List[Dict[str, Any]] = []

    def assistant() -> Dict[str, Any]:
        if not messages or messages[-1]["role"] != "assistant":
            messages.append({"role": "assistant", "content": [], "openai_items": []})
        return messages[-1]

    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item["role"] == "user":
            messages.append({"role": "user", "content": _content(item["content"])})
        elif kind == "message" and item["role"] == "assistant":
            text = item["content"] if isinstance(item["content"], str) else "".join(
                p.get("text") or p.get("refusal") or "" for p in item["content"])
            target = assistant()
            target["content"].append({"type": "text", "text": text})
            target["openai_items"].append({"type": "message", **{
                k: item[k] for k in ("id", "phase") if k in item}})
        elif kind == "function_call":
            target = assistant()
            target["content"].append({"type": "tool_use", "id": item["call_id"],
                                      "name": item["name"], "input": _input(item["arguments"])})
            target["openai_items"].append({"type": "function_call", "call_id": item["call_id"],
                                           **{k: item[k] for k in ("id", "namespace")
                                              if k in item}})
        elif kind == "function_call_output":
            output = item["output"]
            result = {"type": "tool_result", "tool_use_id": item["call_id"],
                      "content": output if isinstance(output, str) else _content(output)}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list) \
                    and all(b["type"] == "tool_result" for b in last["content"]):
                last["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result]})
        else:  # reasoning, built-in tool items, developer messages: carried as they are
            assistant()["openai_items"].append(item)
    return system, messages


def request_of(body: Dict[str, Any]) -> ModelRequest:
    system, messages = history_of(body)
    tools = [{"name": t["name"], "description": t.get("description"),
              "input_schema": t.get("parameters"), **({"strict": True} if t.get("strict")
                                                      else {})}
             for t in body.get("tools") or () if t.get("type") == "function"]
    form = (body.get("text") or {}).get("format") or {}
    request = ModelRequest(model=body["model"], system=system, messages=messages, tools=tools,
                           max_tokens=body.get("max_output_tokens") or 8192)
    if form.get("type") == "json_schema":
        request.output_format = form["schema"]
    elif body.get("text"):
        request.extra["text"] = body["text"]
    return request


# -- the conversation, normalised the same way for both bodies -----------------------------


def _parts(content: Any) -> Any:
    if isinstance(content, str):
        return content
    return [(p["type"], p.get("text") or p.get("image_url") or p.get("file_url")
             or p.get("file_data") or p.get("file_id"), p.get("filename")) for p in content]


def conversation(body: Dict[str, Any]) -> Tuple[Any, List[Any]]:
    items = body["input"]
    items = [{"role": "user", "content": items}] if isinstance(items, str) else list(items)
    system = body.get("instructions")
    if system is None and items and items[0].get("role") == "system":
        system = items.pop(0)["content"]
    out: List[Any] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item["role"] in ("user", "assistant"):
            content = item["content"]
            if item["role"] == "assistant":
                content = content if isinstance(content, str) else "".join(
                    p.get("text") or p.get("refusal") or "" for p in content)
            out.append((item["role"], _parts(content), item.get("id"), item.get("phase")))
        elif kind == "function_call":
            out.append((kind, item["call_id"], item["name"], _input(item["arguments"]),
                        item.get("id"), item.get("namespace")))
        elif kind == "function_call_output":
            out.append((kind, item["call_id"], _parts(item["output"])))
        else:
            out.append(json.dumps(item, sort_keys=True))
    return system or None, out  # an empty system prompt is none


def _tools(body: Dict[str, Any]) -> List[Any]:
    return [(t["name"], t.get("description") or None, t.get("parameters"),
             t.get("strict") is True)
            for t in body.get("tools") or () if t.get("type") == "function"]


# -- the recorded reply, worked out without the client's code ------------------------------


def _final(response: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    if response["body"] is not None:
        return response["body"]  # type: ignore[no-any-return]
    for line in (response["sse"] or "").splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event.get("type") in ("response.completed", "response.incomplete",
                                     "response.failed"):
                return event["response"]  # type: ignore[no-any-return]
    return None


def expected(body: Dict[str, Any]) -> Dict[str, Any]:
    texts, thinking, calls, refused = [], [], [], False
    for item in body["output"]:
        if item["type"] == "message":
            text = "".join(p.get("text", "") for p in item["content"]
                           if p["type"] == "output_text")
            refusal = "".join(p.get("refusal", "") for p in item["content"]
                              if p["type"] == "refusal")
            texts.append(text or refusal)
            refused = refused or (bool(refusal) and not text)
        elif item["type"] == "function_call":
            calls.append((item["call_id"], item["name"], _input(item["arguments"])))
        elif item["type"] == "reasoning":
            thinking += [p["text"] for key in ("summary", "content")
                         for p in item.get(key) or () if p.get("text")]
    status = body.get("status")
    stop = "tool_use" if calls else "refusal" if refused else "end_turn"
    if status == "incomplete":
        reason = (body.get("incomplete_details") or {}).get("reason")
        stop = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}.get(
            reason, reason or "max_tokens")
    elif status != "completed":
        stop = status
    usage = body.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    cached, written = details.get("cached_tokens") or 0, details.get("cache_write_tokens") or 0
    return {"text": "".join(texts), "thinking": "\n\n".join(thinking), "calls": calls,
            "stop": stop, "id": body.get("id"), "model": body.get("model"),
            "usage": {"input_tokens": (usage.get("input_tokens") or 0) - cached - written,
                      "output_tokens": usage.get("output_tokens") or 0,
                      "cache_creation_input_tokens": written,
                      "cache_read_input_tokens": cached,
                      "reasoning_tokens": (usage.get("output_tokens_details") or {}).get(
                          "reasoning_tokens") or 0}}


def _check(reply: Dict[str, Any], want: Dict[str, Any]) -> None:
    blocks = reply["content"]
    assert "".join(b["text"] for b in blocks if b["type"] == "text") == want["text"]
    assert "".join(b["thinking"] for b in blocks if b["type"] == "thinking") == \
        want["thinking"]
    uses = [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    assert uses == want["calls"]
    assert reply["stop_reason"] == want["stop"]
    assert reply["usage"] == want["usage"]
    assert reply["provider_response_id"] == want["id"]
    assert reply["model"] == want["model"]
    json.dumps(reply)  # history stays JSON-serialisable


# -- the replay ---------------------------------------------------------------------------


def _client(url: str, stream: bool) -> OpenAIResponsesClient:
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len('/responses')]}"
    return OpenAIResponsesClient(api_key=KEY, base_url=base, stream=stream, max_retries=0,
                                 default_query=dict(parse_qsl(parts.query)) or None)


@pytest.mark.parametrize("case", CASES, ids=lambda c: getattr(c, "name", "skip"))
@responses.activate
def test_replay(case: Case) -> None:
    recorded, response = case.interaction["request"], case.interaction["response"]
    body = recorded["body"]
    stream = body.get("stream") is True
    ctype = response["headers"].get("content-type", "application/json")
    payload = response["sse"] if response["sse"] is not None else json.dumps(response["body"])
    client = _client(recorded["url"], stream)
    # Where the client posts: /v1/responses (a server recorded at /responses, such as
    # DeepSeek's, is reached under /v1 too); the recorded query string as given.
    query = urlsplit(recorded["url"]).query
    url = client._transport.shown_url + ("?" + query if query else "")
    responses.add(responses.POST, url, body=payload.encode("utf-8"),
                  status=response["status"], content_type=ctype)
    request = request_of(body)
    final = _final(response)
    if response["status"] >= 400 or (final or {}).get("status") == "failed":
        error = final["error"]  # type: ignore[index]
        with pytest.raises((APIStatusError, APIConnectionError)) as raised:
            client.create(request)
        assert error["message"] in str(raised.value)
        if response["status"] >= 400:
            assert isinstance(raised.value, BadRequestError)  # all recorded ones are 400s
            assert raised.value.status_code == 400
    else:
        assert final is not None
        _check(client.create(request), expected(final))
    sent = json.loads(responses.calls[0].request.body)
    assert conversation(sent) == conversation(body)
    assert _tools(sent) == [(n, d, p, s) for n, d, p, s in _tools(body)]
    assert all(isinstance(t["strict"], bool) for t in sent.get("tools") or ())
    assert sent["max_output_tokens"] == (body.get("max_output_tokens") or 8192)
    assert sent["store"] is False and sent["include"] == ["reasoning.encrypted_content"]
    if request.output_format is not None:
        assert sent["text"]["format"]["schema"] == body["text"]["format"]["schema"]
        assert sent["text"]["format"]["name"] == "output"


def test_every_recorded_interaction_is_replayed() -> None:
    names = [c.name for c in CASES if isinstance(c, Case)]
    if not names:
        pytest.skip("../shared data absent")
    assert len(names) == len(set(names)) == 270
