"""Replay real recorded Chat Completions traffic (../shared) through OpenAIChatClient.

``recorded-openai-compatible-traffic`` holds pydantic-ai's VCR cassettes: 521
``chat/completions`` interactions with 15 providers (JSON and SSE replies, 400/404/429
errors). Each recorded reply is served back with ``responses`` and the client's reply is
checked against what the recording says, worked out here without the client's code: text,
every tool call's name, id and arguments, stop reason, usage, and errors mapped to the
right class. Replies the client cannot represent (not a chat completion at all) must give
a clear ``APIConnectionError``. Nothing is skipped. The YAML is parsed once per run, at
collection, with libyaml when available.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlsplit

import pytest
import responses
from helpers import SHARED

from lattice.errors import (
    APIConnectionError,
    APIError,
    BadRequestError,
    NotFoundError,
    RateLimitError,
)
from lattice.models.base import ModelRequest
from lattice.models.openai import OpenAIChatClient

DATA = SHARED / "data" / "recorded-openai-compatible-traffic"
KEY = "sk-replay-0123456789abcdef"

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML is optional
    yaml = None
_LOADER = getattr(yaml, "CSafeLoader", None) or getattr(yaml, "SafeLoader", None)

_FINISH = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
           "function_call": "tool_use", "content_filter": "refusal"}
_BY_STATUS = {400: BadRequestError, 404: NotFoundError, 429: RateLimitError}


@dataclass
class Case:
    name: str
    uri: str
    stream: bool
    status: int
    content_type: str
    body: str


def _cases() -> List[Any]:
    if yaml is None or not DATA.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="PyYAML or data absent"))]
    cases: List[Any] = []
    for path in sorted(DATA.glob("pydantic-ai/**/*.yaml")):
        loaded = yaml.load(path.read_text("utf-8"), Loader=_LOADER)
        for index, item in enumerate(loaded["interactions"]):
            req, resp = item["request"], item["response"]
            if req["method"] != "POST" or not urlsplit(req["uri"]).path.endswith(
                    "/chat/completions"):
                continue
            sent = req.get("parsed_body") or req.get("body") or {}
            sent = json.loads(sent) if isinstance(sent, str) else sent
            if "parsed_body" in resp:
                body = json.dumps(resp["parsed_body"])
            else:
                body = resp["body"]["string"]
            ctype = (resp.get("headers") or {}).get("content-type", ["application/json"])[0]
            name = path.relative_to(DATA / "pydantic-ai").with_suffix("").as_posix()
            cases.append(Case(f"{name}#{index}", req["uri"], sent.get("stream") is True,
                              resp["status"]["code"], ctype, body))
    return cases


CASES = _cases()  # parsed once per run


# -- what the recording says, worked out without the client's code --------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict)
                   and p.get("type") == "text" and isinstance(p.get("text"), str))


def _thinking_of(content: Any) -> List[str]:
    """Mistral's thinking parts: ``{"type": "thinking", "thinking": [text parts]}``."""
    found: List[str] = []
    for part in content if isinstance(content, list) else ():
        if part.get("type") == "thinking":
            found += [p["text"] for p in part["thinking"] if p.get("type") == "text"]
    return found


def _input(arguments: Any) -> Any:
    if arguments in (None, ""):
        return {}
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _stop(finish: Any, calls: int, text: str, refusal: Any) -> Any:
    stop = ("tool_use" if calls else "end_turn") if finish in (None, "") else \
        _FINISH.get(finish, finish)
    if stop == "end_turn" and not text and isinstance(refusal, str) and refusal:
        stop = "refusal"
    return stop


def _usage(usage: Any) -> Dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"input_tokens": (usage.get("prompt_tokens") or 0) - cached,
            "output_tokens": usage.get("completion_tokens") or 0,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


def _expected_json(body: Dict[str, Any]) -> Dict[str, Any]:
    message = body["choices"][0]["message"]
    calls = [(c.get("id"), c["function"].get("name"), _input(c["function"].get("arguments")))
             for c in message.get("tool_calls") or ()]
    text = _text_of(message.get("content"))
    thinking = message.get("reasoning_content")
    thinking = thinking if isinstance(thinking, str) else message.get("reasoning")
    thinking = (thinking if isinstance(thinking, str) else "") + "".join(
        _thinking_of(message.get("content")))
    return {"text": text or (message.get("refusal") or ""), "calls": calls,
            "thinking": thinking,
            "stop": _stop(body["choices"][0].get("finish_reason"), len(calls), text,
                          message.get("refusal")),
            "usage": _usage(body.get("usage")), "id": body.get("id") or None,
            "model": body.get("model") or None}


def _expected_stream(text: str) -> Tuple[Optional[str], Dict[str, Any]]:
    """(error message or None, expectations) for an SSE body."""
    chunks, event = [], None
    for line in text.splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and line[5:].strip() != "[DONE]":
            chunk = json.loads(line[5:])
            if event == "error" or chunk.get("error"):
                return (chunk.get("error") or chunk)["message"], {}
            chunks.append(chunk)
    texts: List[str] = []
    thinking: List[str] = []
    calls: Dict[Any, Dict[str, Any]] = {}
    finish = usage = refusal = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            texts.append(_text_of(delta.get("content")))
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    thinking.append(delta[key])
                    break
            thinking += _thinking_of(delta.get("content"))
            refusal = (refusal or "") + (delta.get("refusal") or "") or None
            for frag in delta.get("tool_calls") or ():
                call = calls.setdefault(frag.get("index"), {"id": None, "name": None,
                                                            "args": ""})
                call["id"] = call["id"] or frag.get("id")
                call["name"] = call["name"] or (frag.get("function") or {}).get("name")
                call["args"] += (frag.get("function") or {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    found = [(c["id"], c["name"], _input(c["args"])) for c in calls.values()]
    head = next((c for c in chunks if c.get("id")), {})
    joined = "".join(texts)
    return None, {"text": joined or (refusal or ""), "calls": found,
                  "thinking": "".join(thinking),
                  "stop": _stop(finish, len(found), joined, refusal),
                  "usage": _usage(usage), "id": head.get("id"),
                  "model": next((c["model"] for c in chunks if c.get("model")), None)}


# -- the replay ---------------------------------------------------------------------------


def _client(case: Case) -> OpenAIChatClient:
    parts = urlsplit(case.uri)
    base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len('/chat/completions')]}"
    return OpenAIChatClient(KEY, base_url=base, stream=case.stream, max_retries=0,
                            default_query=dict(parse_qsl(parts.query)) or None)


def _check(reply: Dict[str, Any], want: Dict[str, Any]) -> None:
    text = "".join(b["text"] for b in reply["content"] if b["type"] == "text")
    assert text == want["text"]
    thinking = [b["thinking"] for b in reply["content"] if b["type"] == "thinking"]
    assert thinking == ([want["thinking"]] if want["thinking"] else [])
    uses = [b for b in reply["content"] if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [(n, i) for _, n, i in want["calls"]]
    for use, (call_id, _, _) in zip(uses, want["calls"]):
        assert use["id"] == call_id if call_id else use["id"].startswith("call_lattice_")
    assert len({u["id"] for u in uses}) == len(uses)
    assert reply["stop_reason"] == want["stop"]
    assert reply["usage"] == want["usage"]
    assert reply["provider_response_id"] == want["id"]
    assert reply["model"] == want["model"]
    json.dumps(reply)  # history stays JSON-serialisable


@pytest.mark.parametrize("case", CASES, ids=lambda c: getattr(c, "name", "skip"))
@responses.activate
def test_replay(case: Case) -> None:
    responses.add(responses.POST, case.uri, body=case.body.encode("utf-8"),
                  status=case.status, content_type=case.content_type)
    request = ModelRequest(model="replay", messages=[{"role": "user", "content": "hi"}])
    client = _client(case)
    if case.status >= 400:
        body = json.loads(case.body)
        with pytest.raises(_BY_STATUS[case.status]) as info:
            client.create(request)
        assert info.value.message == body["error"]["message"]
        assert info.value.status_code == case.status and info.value.body == body
        return
    if "text/event-stream" in case.content_type:
        error, want = _expected_stream(case.body)
        if error is not None:
            with pytest.raises(APIError) as raised:
                client.create(request)
            assert raised.value.message == error
            assert isinstance(raised.value, BadRequestError)  # both recorded ones are 400s
            return
    else:
        body = json.loads(case.body) if "json" in case.content_type else case.body
        if not isinstance(body, dict) or not body.get("choices"):  # not a chat completion
            with pytest.raises(APIConnectionError, match="not a chat.completion|malformed"):
                client.create(request)
            return
        want = _expected_json(body)
    _check(client.create(request), want)


def test_every_recorded_interaction_is_replayed() -> None:
    names = [c.name for c in CASES if isinstance(c, Case)]
    if not names:
        pytest.skip("PyYAML or ../shared data absent")
    assert len(names) == len(set(names)) == 521
