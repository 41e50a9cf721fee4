"""Replay real recorded Messages API traffic (../shared) through AnthropicClient.

Sources (see ``SOURCES.md`` there): pydantic-ai VCR cassettes (YAML, needs PyYAML),
opencode JSON cassettes and two raw SSE captures from anthropic-sdk-python. Every
``POST /v1/messages`` to api.anthropic.com is served back with ``responses``; the test
checks the request we send equals the recorded one and the reply we assemble says what
the recorded response says. Nothing from ../shared is copied into the repository.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional
from urllib.parse import urlparse

import pytest
import responses
from helpers import SHARED

from lattice.errors import APIStatusError, BadRequestError, NotFoundError
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest

DATA = SHARED / "data" / "recorded-anthropic-traffic"
URL = "https://api.anthropic.com/v1/messages"
KEY = "sk-ant-replay-0123456789"

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML is optional
    yaml = None
_LOADER = getattr(yaml, "CSafeLoader", None) or getattr(yaml, "SafeLoader", None)  # C: 10x


@dataclass
class Case:
    name: str
    request: Optional[Dict[str, Any]]  # None for raw captures without their request
    status: int
    content_type: str
    body: str


def _is_messages_call(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.netloc == "api.anthropic.com" and parsed.path == "/v1/messages"


def _pydantic_cases(root: Path) -> List[Case]:
    cases = []
    for path in sorted(root.glob("pydantic-ai/**/*.yaml")):
        loaded = yaml.load(path.read_text("utf-8"), Loader=_LOADER)  # parsed once per run
        for index, item in enumerate(loaded["interactions"]):
            req, resp = item["request"], item["response"]
            if req["method"] != "POST" or not _is_messages_call(req["uri"]):
                continue
            request = req.get("parsed_body")
            if request is None:
                request = json.loads(req["body"])
            if "parsed_body" in resp:
                body = json.dumps(resp["parsed_body"])
            else:
                body = resp["body"]["string"]
            ctype = (resp.get("headers") or {}).get("content-type", ["application/json"])[0]
            cases.append(Case(f"{path.stem}#{index}", request, resp["status"]["code"], ctype, body))
    return cases


def _opencode_cases(root: Path) -> List[Case]:
    cases = []
    for path in sorted(root.glob("opencode/**/*.json")):
        for index, item in enumerate(json.loads(path.read_text("utf-8"))["interactions"]):
            req, resp = item["request"], item["response"]
            if req["method"] != "POST" or not _is_messages_call(req["url"]):
                continue
            ctype = resp["headers"].get("content-type", "application/json")
            cases.append(Case(f"opencode:{path.stem}#{index}", json.loads(req["body"]),
                              resp["status"], ctype, resp["body"]))
    return cases


def _sdk_cases(root: Path) -> List[Case]:
    return [Case(f"sdk:{path.stem}", None, 200, "text/event-stream", path.read_text("utf-8"))
            for path in sorted(root.glob("anthropic-sdk-python/**/*.txt"))]


def _all_cases() -> List[Any]:
    if not DATA.is_dir():
        return []
    cases: List[Any] = _opencode_cases(DATA) + _sdk_cases(DATA)
    if yaml is not None:
        cases += _pydantic_cases(DATA)
    else:  # pragma: no cover
        cases.append(pytest.param(None, marks=pytest.mark.skip(reason="PyYAML not installed")))
    return cases


CASES = _all_cases()
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared recorded traffic absent")


# -- what the recording says, worked out without the client's code --------------------------


def _expected_from_sse(text: str) -> Dict[str, Any]:
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    message: Dict[str, Any] = {}
    usage: Dict[str, Any] = {}
    blocks: Dict[int, Dict[str, Any]] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = event["message"]
            usage = dict(message["usage"])
        elif kind == "content_block_start":
            blocks[event["index"]] = {"start": event["content_block"], "text": "", "json": None,
                                      "thinking": "", "signature": None}
        elif kind == "content_block_delta":
            b, d = blocks[event["index"]], event["delta"]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "input_json_delta":
                b["json"] = (b["json"] or "") + d["partial_json"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "signature_delta":
                b["signature"] = d["signature"]
        elif kind == "message_delta":
            message["stop_reason"] = event["delta"].get("stop_reason")
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
    return {"message": message, "usage": usage, "blocks": [blocks[i] for i in sorted(blocks)]}


def _usage4(usage: Dict[str, Any]) -> Dict[str, int]:
    keys = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens")
    return {k: usage.get(k) or 0 for k in keys}


def _model_request(recorded: Optional[Dict[str, Any]]) -> ModelRequest:
    if recorded is None:
        return ModelRequest(model="claude-replay", messages=[{"role": "user", "content": "hi"}])
    extra = {k: v for k, v in recorded.items()
             if k not in ("model", "messages", "max_tokens", "system", "tools", "stream")}
    for key in ("system", "tools", "stream"):  # values the client would leave out: extra
        if key in recorded and not recorded[key]:
            extra[key] = recorded[key]
    return ModelRequest(model=recorded["model"], messages=recorded["messages"],
                        max_tokens=recorded["max_tokens"], system=recorded.get("system") or None,
                        tools=recorded.get("tools") or [], extra=extra)


@pytest.mark.parametrize("case", CASES, ids=lambda c: getattr(c, "name", "skip"))
@responses.activate
def test_replay(case: Case) -> None:
    responses.add(responses.POST, URL, body=case.body.encode("utf-8"), status=case.status,
                  content_type=case.content_type)
    stream = case.request.get("stream") is True if case.request else True
    client = AnthropicClient(KEY, stream=stream, max_retries=0)
    request = _model_request(case.request)
    if case.status >= 400:
        body = json.loads(case.body)
        with pytest.raises(APIStatusError) as info:
            client.create(request)
        expected_cls = {400: BadRequestError, 404: NotFoundError}[case.status]
        assert isinstance(info.value, expected_cls)
        assert info.value.message == body["error"]["message"]
        assert info.value.status_code == case.status and info.value.body == body
        assert info.value.request_id == body.get("request_id")
        return
    reply = client.create(request)
    if case.request is not None:
        sent = responses.calls[0].request.body
        assert json.loads(sent) == case.request  # system and messages exactly as given
    assert reply["role"] == "assistant"
    if "text/event-stream" in case.content_type:
        _check_stream_reply(reply, _expected_from_sse(case.body))
    else:
        message = json.loads(case.body)
        assert reply["content"] == message["content"]
        assert reply["provider_response_id"] == message["id"]
        assert reply["model"] == message["model"]
        assert reply["stop_reason"] == message["stop_reason"]
        assert reply["usage"] == _usage4(message["usage"])
    json.dumps(reply)  # history stays JSON-serialisable


def _check_stream_reply(reply: Dict[str, Any], expected: Dict[str, Any]) -> None:
    message = expected["message"]
    assert reply["provider_response_id"] == message["id"]
    assert reply["model"] == message["model"]
    assert reply["stop_reason"] == message["stop_reason"]
    assert reply["usage"] == _usage4(expected["usage"])
    assert len(reply["content"]) == len(expected["blocks"])
    for got, want in zip(reply["content"], expected["blocks"]):
        start = want["start"]
        assert got["type"] == start["type"]
        for key in ("id", "name", "data"):
            assert got.get(key) == start.get(key)
        if start["type"] == "text":
            assert got["text"] == start["text"] + want["text"]
        if start["type"] == "thinking":
            assert got["thinking"] == want["thinking"]
            assert got["signature"] == (want["signature"] or start.get("signature"))
        if want["json"] is not None:
            try:
                expected_input = json.loads(want["json"]) if want["json"].strip() else {}
            except ValueError:  # a call cut off by max_tokens is kept with empty input
                assert reply["stop_reason"] == "max_tokens"
                expected_input = {}
            assert got["input"] == expected_input


def test_replayed_every_anthropic_messages_interaction() -> None:
    if yaml is None:  # pragma: no cover
        pytest.skip("PyYAML not installed")
    names = [c.name for c in CASES if isinstance(c, Case)]
    assert len(names) == len(set(names))
    assert len(names) >= 180, len(names)
