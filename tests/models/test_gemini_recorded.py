"""Replay real recorded Gemini traffic (../shared) through GeminiClient and VertexGeminiClient.

``recorded-gemini-traffic`` holds 518 ``generateContent``/``streamGenerateContent``
interactions from seven projects (see its SOURCES.md). For each one the recorded request is
turned into a lattice history (worked out here, without the client's code): user parts as
text, image and document blocks (``inlineData`` of any media type as a base64 document,
``fileData`` as a URL source), ``functionCall`` parts as ``tool_use`` blocks and
``functionResponse`` parts as ``tool_result`` blocks, and every model turn's parts in the
message's ``gemini_parts`` (stubs for the text and calls, with their signatures and ids;
thought parts, code execution and server tool parts verbatim). Settings the history does
not hold (``toolConfig``, ``safetySettings``, built-in tools, generation settings) go in
``ModelRequest.extra``. The client sends it to a ``responses`` mock, and the test checks

* the body it sent against the recorded one, structurally: roles and parts in order, texts,
  media, call names, arguments and ids, every ``thoughtSignature`` (compared as bytes:
  some recorders re-encoded them base64url), function results (the wrapping key of
  ``response`` is each client's choice: lattice sends ``{"result": ...}``), the system
  instruction, function declarations and their schema, JSON-schema output, and the rest;
  snake_case keys read as their camelCase names; ``maxOutputTokens`` is always sent;
* the reply it parsed (JSON, SSE with CRLF, or a JSON array of chunks) against the
  recorded one worked out here: text, thinking, calls, stop reason, usage (field by field
  from the last chunk with it), response id and model; recorded errors raise their class;
* a reply's parts sent back next turn are the recorded candidate's parts (signatures on
  the same parts, in the same order).

Skipped, with the reason: what the contract does not cover (see ``SKIPS``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import pytest
import responses
from helpers import SHARED

from lattice.errors import (
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    RateLimitError,
)
from lattice.models.base import ModelRequest
from lattice.models.gemini import GeminiClient, VertexGeminiClient

DATA = SHARED / "data" / "recorded-gemini-traffic"
KEY = "AIza-replay-0123456789abcdef"
TOKEN = "ya29.replay-token-0123456789"

# Why an interaction is not replayed (checked against its features and URL).
SKIPS = {
    "invalid-role": "the request uses a role no history holds (a deliberately invalid one)",
    "no-project": "a Vertex URL without projects/{p}/locations/{r} (express mode or a "
                  "gateway): not in the contract",
    "video-metadata": "a fileData part with videoMetadata (clip offsets): no block holds it",
}

_SNAKE = {"function_call": "functionCall", "function_response": "functionResponse",
          "thought_signature": "thoughtSignature", "mime_type": "mimeType",
          "file_uri": "fileUri", "inline_data": "inlineData", "file_data": "fileData",
          "include_thoughts": "includeThoughts", "tool_type": "toolType",
          "response_mime_type": "responseMimeType", "response_schema": "responseSchema",
          "function_declarations": "functionDeclarations",
          "stop_sequences": "stopSequences", "thinking_budget": "thinkingBudget",
          "thinking_level": "thinkingLevel", "parameters_json_schema": "parametersJsonSchema",
          "display_name": "displayName"}


@dataclass
class Case:
    name: str
    interaction: Dict[str, Any]

    @property
    def skip(self) -> Optional[str]:
        features = self.interaction["features"]
        url = self.interaction["request"]["url"]
        if "input-role:invalid_role" in features:
            return "invalid-role"
        if "aiplatform" in url and "/projects/" not in url or "localhost" in url:
            return "no-project"
        if "input-part:videoMetadata" in features:
            return "video-metadata"
        return None


def _cases() -> List[Any]:
    if not DATA.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared data absent"))]
    cases = []
    for path in sorted(DATA.glob("**/*.json")):
        name = path.relative_to(DATA).with_suffix("").as_posix()
        for item in json.loads(path.read_text("utf-8"))["interactions"]:
            case = Case(f"{name}#{item['index']}", item)
            marks = [pytest.mark.skip(reason=SKIPS[case.skip])] if case.skip else []
            cases.append(pytest.param(case, marks=marks, id=case.name))
    return cases


CASES = _cases()


def camel(value: Any) -> Any:
    """``value`` with the snake_case proto field names some recorders sent as camelCase."""
    if isinstance(value, dict):
        return {_SNAKE.get(k, k): camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel(v) for v in value]
    return value


def _bytes(signature: Any) -> Any:
    """A signature as bytes: standard and URL-safe base64 read alike."""
    if not isinstance(signature, str):
        return signature
    text = signature.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return signature


# -- the recorded request as a lattice history ---------------------------------------------


def _media_block(part: Dict[str, Any]) -> Dict[str, Any]:
    if "inlineData" in part:
        data = part["inlineData"]
        mime = data.get("mimeType", "")
        kind = "image" if mime.startswith("image/") else "document"
        return {"type": kind, "source": {"type": "base64", "media_type": mime,
                                         "data": data.get("data", "")}}
    data = part["fileData"]
    mime = data.get("mimeType", "")
    kind = "image" if mime.startswith("image/") else "document"
    return {"type": kind, "source": {"type": "url", "url": data["fileUri"],
                                     "media_type": mime}}


def _result_text(response: Any) -> Tuple[bool, str]:
    """(is_error, text) of a functionResponse's ``response``: one str value as it is,
    anything else as JSON (how a tool's structured result reads as text)."""
    if isinstance(response, dict) and len(response) == 1:
        (key, value), = response.items()
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return key == "error", text
    if response in (None, {}):
        return False, ""
    return False, json.dumps(response, sort_keys=True)


def _user_content(parts: List[Dict[str, Any]], names: Dict[str, str]) -> List[Dict[str, Any]]:
    blocks: List[Dict[str, Any]] = []
    for part in parts:
        if "functionResponse" in part:
            response = part["functionResponse"]
            error, text = _result_text(response.get("response"))
            call_id = names.get(response.get("id") or "") or names.get(
                "name:" + response["name"], "")
            content: Any = text
            media = [_media_block(p) for p in response.get("parts") or ()]
            if media:
                content = ([{"type": "text", "text": text}] if text else []) + media
            block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
            if error:
                block["is_error"] = True
            blocks.append(block)
        elif set(part) == {"text"}:
            blocks.append({"type": "text", "text": part["text"]})
        else:
            blocks.append(_media_block(part))
    return blocks


def _model_message(parts: List[Dict[str, Any]], turn: int, names: Dict[str, str]
                   ) -> Dict[str, Any]:
    content: List[Dict[str, Any]] = []
    kept: List[Dict[str, Any]] = []
    for index, part in enumerate(parts):
        signed = {k: v for k, v in part.items() if k == "thoughtSignature"}
        if "functionCall" in part and not part.get("thought"):
            call = part["functionCall"]
            block_id = call.get("id") or f"call_{turn}_{index}"
            names[call.get("id") or block_id] = block_id
            names["name:" + call["name"]] = block_id
            content.append({"type": "tool_use", "id": block_id, "name": call["name"],
                            "input": call.get("args") or {}})
            kept.append({"part": "functionCall", "call": block_id, **signed,
                         **({"id": call["id"]} if call.get("id") else {})})
        elif "text" in part and not part.get("thought") and set(part) <= {
                "text", "thoughtSignature"} and part["text"]:
            content.append({"type": "text", "text": part["text"]})
            kept.append({"part": "text", **signed})
        else:
            kept.append(part)
    return {"role": "assistant", "content": content, "gemini_parts": kept}


def request_of(body: Dict[str, Any], model: str) -> ModelRequest:
    names: Dict[str, str] = {}
    messages: List[Dict[str, Any]] = []
    for turn, item in enumerate(body["contents"]):
        if item.get("role") == "model":
            messages.append(_model_message(item.get("parts") or [], turn, names))
        else:
            messages.append({"role": "user",
                             "content": _user_content(item.get("parts") or [], names)})
    system = body.get("systemInstruction")
    system_text = "".join(p.get("text", "") for p in system["parts"]) if system else None
    tools, extra_tools = [], []
    for tool in body.get("tools") or ():
        for declaration in tool.get("functionDeclarations") or ():
            tools.append({"name": declaration["name"],
                          "description": declaration.get("description") or "",
                          "input_schema": declaration.get("parametersJsonSchema")
                          or declaration.get("parameters")})
        if "functionDeclarations" not in tool:
            extra_tools.append(tool)
    config = dict(body.get("generationConfig") or {})
    request = ModelRequest(model=model, messages=messages, system=system_text, tools=tools,
                           max_tokens=config.pop("maxOutputTokens", 8192))
    if "responseJsonSchema" in config and config.get("responseMimeType") == "application/json":
        request.output_format = config.pop("responseJsonSchema")
        config.pop("responseMimeType")
    if config:
        request.extra["generationConfig"] = config
    if extra_tools:
        request.extra["tools"] = extra_tools
    for key, value in body.items():
        if key not in ("contents", "systemInstruction", "tools", "generationConfig"):
            request.extra[key] = value
    return request


# -- the bodies, normalised the same way ---------------------------------------------------


def _part(part: Dict[str, Any]) -> Any:
    out = dict(part)
    if "thoughtSignature" in out:
        out["thoughtSignature"] = _bytes(out["thoughtSignature"])
    if "functionResponse" in out:
        response = dict(out["functionResponse"])
        response["response"] = _result_text(response.get("response"))
        if response.get("parts"):
            response["parts"] = [_part(p) for p in response["parts"]]
        out["functionResponse"] = response
    if "functionCall" in out:
        call = dict(out["functionCall"])
        call["args"] = call.get("args") or {}
        out["functionCall"] = call
    if "fileData" in out:  # the media type is the recorder's or guessed
        out["fileData"] = out["fileData"]["fileUri"]
    return out


def conversation(body: Dict[str, Any]) -> List[Any]:
    out = []
    for item in body["contents"]:
        parts = [_part(p) for p in item.get("parts") or ()
                 if not (set(p) == {"text"} and p["text"] == "" and item.get("role") == "model")]
        if parts:
            out.append((item.get("role") or "user", parts))
    return out


def _declarations(body: Dict[str, Any]) -> List[Any]:
    return [(d["name"], d.get("description") or "",
             d.get("parametersJsonSchema") or d.get("parameters"))
            for t in body.get("tools") or () for d in t.get("functionDeclarations") or ()]


def _settings(body: Dict[str, Any]) -> Dict[str, Any]:
    config = dict(body.get("generationConfig") or {})
    config.pop("maxOutputTokens", None)
    return {"generationConfig": config,
            "system": body.get("systemInstruction", {}).get("parts"),
            "tools": [t for t in body.get("tools") or () if "functionDeclarations" not in t],
            **{k: v for k, v in body.items()
               if k not in ("contents", "systemInstruction", "tools", "generationConfig")}}


# -- the recorded reply, worked out without the client's code ------------------------------

_FINISH = ("FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY")


def chunks_of(response: Dict[str, Any]) -> List[Dict[str, Any]]:
    if response["sse"] is not None:
        return [json.loads(line[5:]) for line in re.split(r"\r?\n", response["sse"])
                if line.startswith("data:")]
    body = response["body"]
    return body if isinstance(body, list) else [body]


def expected(chunks: List[Dict[str, Any]]) -> Dict[str, Any]:
    texts, thinking, calls, usage = [], [], [], {}
    finish = message = response_id = model = blocked = None
    for chunk in chunks:
        response_id = chunk.get("responseId") or response_id
        model = chunk.get("modelVersion") or model
        usage.update(chunk.get("usageMetadata") or {})
        if (chunk.get("promptFeedback") or {}).get("blockReason"):
            blocked = chunk["promptFeedback"]["blockReason"]
        for candidate in (chunk.get("candidates") or [])[:1]:
            reason = candidate.get("finishReason")
            finish = _FINISH[reason] if isinstance(reason, int) else reason or finish
            message = candidate.get("finishMessage") or message
            for part in (candidate.get("content") or {}).get("parts") or ():
                if part.get("thought"):
                    thinking.append(part.get("text", ""))
                elif "functionCall" in part:
                    call = part["functionCall"]
                    calls.append((call.get("id"), call["name"], call.get("args") or {}))
                elif set(part) <= {"text", "thoughtSignature"}:
                    texts.append(part.get("text", ""))
    stop = "tool_use" if calls else "end_turn"
    if blocked:
        stop = "refusal"
    elif finish == "MAX_TOKENS":
        stop = "max_tokens"
    elif finish in ("SAFETY", "MODEL_ARMOR", "RECITATION", "PROHIBITED_CONTENT"):
        stop = "refusal"
    elif finish in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL") and not calls:
        stop = "malformed_function_call"
    cached = usage.get("cachedContentTokenCount") or 0
    thoughts = usage.get("thoughtsTokenCount") or 0
    return {"text": "".join(texts), "thinking": "".join(thinking), "calls": calls,
            "stop": stop, "id": response_id, "model": model, "message": message,
            "blocked": blocked, "finish": finish,
            "usage": {"input_tokens": (usage.get("promptTokenCount") or 0) - cached,
                      "output_tokens": (usage.get("candidatesTokenCount") or 0) + thoughts,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
                      "reasoning_tokens": thoughts}}


def _check(reply: Dict[str, Any], want: Dict[str, Any]) -> None:
    blocks = reply["content"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    if want["stop"] == "refusal" and not want["text"]:
        assert (want["blocked"] or want["finish"]) in text
        assert want["blocked"] or want["message"] is None or want["message"] in text
    elif want["stop"] == "malformed_function_call":
        assert text == (want["text"] or want["message"])
    else:
        assert text == want["text"]
    assert "".join(b["thinking"] for b in blocks if b["type"] == "thinking") == \
        want["thinking"]
    uses = [b for b in blocks if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [(n, a) for _, n, a in want["calls"]]
    for use, (given, _, _) in zip(uses, want["calls"]):
        if given or want["id"]:  # made from the response id and the part's index
            assert use["id"] == given if given else use["id"].startswith(f"{want['id']}_")
    assert len({u["id"] for u in uses}) == len(uses)
    assert reply["stop_reason"] == want["stop"]
    assert reply["usage"] == want["usage"]
    assert reply["provider_response_id"] == want["id"]
    assert reply["model"] == want["model"]
    json.dumps(reply)  # history stays JSON-serialisable


def _round_trip(client: Any, model: str, reply: Dict[str, Any], chunks: List[Dict[str, Any]],
                url: str, ctype: str) -> None:
    """Sending the reply back gives the recorded candidate's parts (one JSON reply)."""
    parts = ((chunks[0].get("candidates") or [{}])[0].get("content") or {}).get("parts")
    if not parts:
        return
    history = [{"role": "user", "content": "hi"}, reply, {"role": "user", "content": "go"}]
    payload = json.dumps(chunks[0])
    if client.stream:
        payload, ctype = f"data: {payload}\r\n\r\n", "text/event-stream"
    responses.add(responses.POST, url, body=payload, content_type=ctype)
    client.create(ModelRequest(model=model, messages=history))
    sent = camel(json.loads(responses.calls[-1].request.body))["contents"][1]["parts"]
    calls = [p for p in parts if "functionCall" in p]
    want = [p for p in parts if not (set(p) == {"text"} and p["text"] == "")]
    for part in want:  # ids the model did not give are not sent back
        if "functionCall" in part and not part["functionCall"].get("id"):
            assert "id" not in next(p for p in sent if p.get("functionCall", {}).get(
                "name") == part["functionCall"]["name"])["functionCall"]
    assert [_part(p) for p in sent] == [_part(p) for p in want], len(calls)


# -- the replay ---------------------------------------------------------------------------

_VERTEX_URL = re.compile(r"^(https?://[^/]+)/(v1|v1beta1)/projects/([^/]+)/locations/([^/]+)/"
                         r"publishers/google/models/([^/:]+):")
_AI_STUDIO_URL = re.compile(r"^(https?://[^/]+)/v1beta/models/([^/:]+):")


def _client(url: str, stream: bool) -> Tuple[Any, str]:
    vertex = _VERTEX_URL.match(url)
    if vertex is not None:
        base, version, project, region, model = vertex.groups()
        return VertexGeminiClient(project_id=project, region=region, api_version=version,
                                  access_token=TOKEN, base_url=base, stream=stream,
                                  max_retries=0), model
    studio = _AI_STUDIO_URL.match(url)
    assert studio is not None, url
    base, model = studio.groups()
    return GeminiClient(api_key=KEY, base_url=base, stream=stream, max_retries=0), model


_ERRORS = {400: BadRequestError, 404: NotFoundError, 429: RateLimitError}


@pytest.mark.parametrize("case", CASES)
@responses.activate
def test_replay(case: Case) -> None:
    recorded, response = case.interaction["request"], case.interaction["response"]
    body = camel(recorded["body"])
    if isinstance(body.get("tools"), dict):  # one old recorder sent a single tool object
        body["tools"] = [body["tools"]]
    url = recorded["url"]
    stream = ":streamGenerateContent" in url
    client, model = _client(url, stream)
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    target = client._model_url(model, method)
    ctype = response["headers"].get("content-type", "application/json")
    if response["sse"] is not None:
        payload = response["sse"]
        ctype = "text/event-stream"
    else:
        payload = json.dumps(response["body"])
        if response["status"] < 400:
            ctype = "application/json"  # a JSON array stream comes as one JSON body
    responses.add(responses.POST, target, body=payload.encode("utf-8"),
                  status=response["status"], content_type=ctype)
    request = request_of(body, model)
    if response["status"] >= 400:
        error = response["body"]["error"]
        with pytest.raises(APIStatusError) as raised:
            client.create(request)
        reasons = [d.get("reason") for d in error.get("details") or ()]
        wanted = AuthenticationError if "API_KEY_INVALID" in reasons else \
            _ERRORS[response["status"]]
        assert type(raised.value) is wanted
        assert raised.value.status_code == response["status"]
        assert error["message"] in str(raised.value)
    else:
        chunks = chunks_of(response)
        reply = client.create(request)
        _check(reply, expected(chunks))
        if len(chunks) == 1:
            _round_trip(client, model, reply, chunks, target, ctype)
    call = responses.calls[0].request
    assert call.url == target  # the model and method in the path; no key in the URL
    assert "key=" not in call.url
    if isinstance(client, GeminiClient):
        assert call.headers["x-goog-api-key"] == KEY
    else:
        assert call.headers["authorization"] == f"Bearer {TOKEN}"
    sent = json.loads(call.body)
    assert conversation(sent) == conversation(body)
    assert _declarations(sent) == [(n, d, s or {"type": "object", "properties": {}})
                                   for n, d, s in _declarations(body)]
    for tool in sent.get("tools") or ():
        for declaration in tool.get("functionDeclarations") or ():
            assert set(declaration) <= {"name", "description", "parametersJsonSchema"}
    assert _settings(sent) == _settings(body)
    assert sent["generationConfig"]["maxOutputTokens"] == \
        (body.get("generationConfig") or {}).get("maxOutputTokens", 8192)


def test_replay_counts() -> None:
    """At most a fifth skipped; every skip has a reason."""
    cases = [p.values[0] for p in CASES if isinstance(p.values[0], Case)]
    if not cases:
        pytest.skip("../shared data absent")
    assert len(cases) == 518
    skipped = Counter(c.skip for c in cases if c.skip)
    print(f"\nGemini replay: {len(cases) - sum(skipped.values())} covered, skipped: "
          f"{dict(skipped)}")
    assert sum(skipped.values()) <= len(cases) // 5


def _signatures(value: Any) -> Any:
    if isinstance(value, dict):
        found = {value[k] for k in ("thoughtSignature", "thought_signature") if k in value}
        return found.union(*(_signatures(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_signatures(v) for v in value))
    return set()


def test_the_mock_accepts_what_google_accepted_and_refuses_what_it_refused() -> None:
    """The mock's checks against real traffic: every request Google answered is accepted
    (its signatures counted as issued), and the invalid role refused in Google's words."""
    from lattice.testing._mock_gemini_checks import gemini_problem

    cases = [p.values[0] for p in CASES if isinstance(p.values[0], Case)]
    if not cases:
        pytest.skip("../shared data absent")
    for case in cases:
        recorded, response = case.interaction["request"], case.interaction["response"]
        model = re.search(r"/models/([^/:]+):", recorded["url"]).group(1)  # type: ignore
        problem = gemini_problem(recorded["body"], model, _signatures(recorded["body"]))
        if response["status"] == 200:
            assert problem is None, (case.name, problem)
        elif "valid role" in response["body"]["error"]["message"]:
            assert problem is not None and problem[1] == response["body"]["error"]["message"]
