"""The Gemini codec without a server: replies, streams, usage, finish reasons, errors,
RetryInfo, and what goes back (``gemini_parts``, placeholder signatures, ids)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import responses

from lattice.errors import (
    APIConnectionError,
    AuthenticationError,
    BadRequestError,
    PromptTooLongError,
    RateLimitError,
)
from lattice.models.base import ModelRequest
from lattice.models.chat_wire import chat_body
from lattice.models.gemini import GeminiClient, VertexGeminiClient, parse_gemini_stream
from lattice.models.gemini_reply import reply_from_gemini
from lattice.models.gemini_status import gemini_error
from lattice.models.gemini_wire import gemini_body, gemini_contents
from lattice.models.responses_wire import responses_body
from lattice.models.retry import RetryPolicy
from lattice.models.wire import request_body

KEY = "AIza-unit-key-0123456789abcdef"
URL = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"


def _chunk(parts: List[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
    candidate = {"content": {"role": "model", "parts": parts}}
    candidate.update({k: extra.pop(k) for k in ("finishReason", "finishMessage")
                      if k in extra})
    return {"candidates": [candidate], **extra}


def test_usage_is_read_field_by_field_from_the_last_chunk_with_it() -> None:
    chunks = [_chunk([{"text": "a"}], usageMetadata={"promptTokenCount": 10,
                                                    "cachedContentTokenCount": 4}),
              _chunk([{"text": "b"}], usageMetadata={"promptTokenCount": 12,
                                                    "candidatesTokenCount": 3}),
              _chunk([], finishReason="STOP", usageMetadata={"thoughtsTokenCount": 5})]
    reply = reply_from_gemini(chunks)
    assert reply["content"] == [{"type": "text", "text": "ab"}]
    assert reply["usage"] == {"input_tokens": 8, "output_tokens": 8,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4,
                              "reasoning_tokens": 5}


@pytest.mark.parametrize("finish,stop", [
    ("STOP", "end_turn"), (1, "end_turn"), ("MAX_TOKENS", "max_tokens"), (2, "max_tokens"),
    ("SAFETY", "refusal"), (3, "refusal"), ("RECITATION", "refusal"),
    ("BLOCKLIST", "refusal"), ("PROHIBITED_CONTENT", "refusal"), ("SPII", "refusal"),
    ("MODEL_ARMOR", "refusal"), ("MALFORMED_FUNCTION_CALL", "malformed_function_call"),
    (9, "malformed_function_call"), ("UNEXPECTED_TOOL_CALL", "malformed_function_call")])
def test_finish_reasons(finish: Any, stop: str) -> None:
    reply = reply_from_gemini(_chunk([], finishReason=finish, finishMessage="why"))
    assert reply["stop_reason"] == stop
    if stop in ("refusal", "malformed_function_call"):
        assert "why" in reply["content"][0]["text"]


def test_a_call_with_unexpected_tool_call_is_a_tool_use() -> None:
    reply = reply_from_gemini(_chunk([{"functionCall": {"name": "x", "args": {}}}],
                                     finishReason="UNEXPECTED_TOOL_CALL", responseId="r1"))
    assert reply["stop_reason"] == "tool_use"
    assert reply["content"][0]["id"] == "r1_0"


def test_a_blocked_prompt_is_a_refusal_saying_why() -> None:
    reply = reply_from_gemini({"promptFeedback": {"blockReason": "SAFETY",
                                                  "blockReasonMessage": "Unsafe."}})
    assert reply["stop_reason"] == "refusal"
    assert reply["content"][0]["text"] == "The prompt was blocked (SAFETY): Unsafe."


def test_streamed_text_is_one_part_and_the_signature_stays_on_it() -> None:
    sse = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in [
        _chunk([{"text": "Hel"}], responseId="r", modelVersion="gemini-3-pro"),
        _chunk([{"text": "lo", "thoughtSignature": "c2ln"}]),
        _chunk([{"functionCall": {"name": "f", "args": {"a": 1}},
                 "thoughtSignature": "c2lnMg=="}], finishReason="STOP")])
    data = sse.encode()
    seen: List[Dict[str, Any]] = []
    # cut anywhere, CR and LF apart included
    reply = parse_gemini_stream(iter([data[i : i + 7] for i in range(0, len(data), 7)]),
                                seen.append)
    assert len(seen) == 3
    assert reply["content"][0] == {"type": "text", "text": "Hello"}
    assert reply["stop_reason"] == "tool_use" and reply["model"] == "gemini-3-pro"
    parts = gemini_contents([reply])[0]["parts"]
    assert parts == [{"text": "Hello", "thoughtSignature": "c2ln"},
                     {"functionCall": {"name": "f", "args": {"a": 1}},
                      "thoughtSignature": "c2lnMg=="}]


def test_a_cut_stream_is_a_connection_error() -> None:
    sse = f"data: {json.dumps(_chunk([{'text': 'partial'}]))}\r\n\r\n".encode()
    with pytest.raises(APIConnectionError):
        parse_gemini_stream(iter([sse]))


def test_an_error_object_mid_stream_raises_its_class() -> None:
    sse = b'data: {"error": {"code": 429, "message": "slow down", ' \
          b'"status": "RESOURCE_EXHAUSTED"}}\r\n\r\n'
    with pytest.raises(RateLimitError):
        parse_gemini_stream(iter([sse]))


def test_thought_parts_and_signatures_go_back_in_order_and_never_elsewhere() -> None:
    parts = [{"text": "thinking...", "thought": True, "thoughtSignature": "AAA="},
             {"text": "Answer", "thoughtSignature": "BBB="},
             {"executableCode": {"language": "PYTHON", "code": "1+1"}},
             {"text": "", "thoughtSignature": "CCC="}]
    reply = reply_from_gemini(_chunk(parts, finishReason="STOP", responseId="r"))
    assert reply["content"] == [{"type": "thinking", "thinking": "thinking..."},
                                {"type": "text", "text": "Answer"}]
    assert gemini_contents([reply])[0]["parts"] == parts
    history = [{"role": "user", "content": "q"}, reply, {"role": "user", "content": "q2"}]
    request = ModelRequest(model="claude", messages=history)
    bodies = [request_body(request, stream=False)[0],
              chat_body(request, stream=False, max_tokens_field="max_tokens")[0],
              responses_body(request, stream=False, store=False)[0]]
    for body in bodies:  # the Messages, Chat Completions and Responses wires
        assert b"gemini_parts" not in body and b"AAA=" not in body


def test_foreign_history_gets_the_placeholder_on_each_turns_first_call() -> None:
    history = [{"role": "user", "content": "q"},
               {"role": "assistant", "content": [
                   {"type": "tool_use", "id": "toolu_1", "name": "a", "input": {}},
                   {"type": "tool_use", "id": "toolu_2", "name": "b", "input": {}}]},
               {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1"},
                   {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no",
                    "is_error": True}]}]
    contents = gemini_contents(history)
    calls = contents[1]["parts"]
    assert calls[0]["thoughtSignature"] == "skip_thought_signature_validator"
    assert "thoughtSignature" not in calls[1] and "id" not in calls[0]["functionCall"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "a", "response": {"result": "1"}}},
        {"functionResponse": {"name": "b", "response": {"error": "no"}}}]


def test_a_model_given_id_goes_back_with_the_call_and_result() -> None:
    reply = reply_from_gemini(_chunk([{"functionCall": {"id": "fc_9", "name": "f",
                                                        "args": {}}}], finishReason="STOP"))
    assert reply["content"][0]["id"] == "fc_9"
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "fc_9",
                                           "content": [{"type": "text", "text": "ok"}]}]}
    contents = gemini_contents([reply, result])
    assert contents[0]["parts"][0]["functionCall"]["id"] == "fc_9"
    assert contents[1]["parts"][0]["functionResponse"] == {
        "name": "f", "response": {"result": "ok"}, "id": "fc_9"}


def test_body_output_format_media_and_extra() -> None:
    request = ModelRequest(
        model="gemini-2.5-flash", system=[{"type": "text", "text": "S"}], max_tokens=100,
        output_format={"type": "object"},
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBO"}},
            {"type": "document", "source": {"type": "base64",
                                            "media_type": "application/pdf", "data": "JVBE"}},
            {"type": "image", "source": {"type": "url", "url": "https://x/a.jpg"}}]}],
        extra={"generationConfig": {"temperature": 0}, "tools": [{"googleSearch": {}}]})
    body = gemini_body(request)
    assert body["systemInstruction"] == {"parts": [{"text": "S"}]}
    assert body["generationConfig"] == {"maxOutputTokens": 100, "temperature": 0,
                                        "responseMimeType": "application/json",
                                        "responseJsonSchema": {"type": "object"}}
    assert body["tools"] == [{"googleSearch": {}}]
    assert body["contents"][0]["parts"][1:] == [
        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
        {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x/a.jpg"}}]


@pytest.mark.parametrize("body,cls", [
    ({"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                             "reason": "API_KEY_INVALID"}]}}, AuthenticationError),
    ({"error": {"code": 400, "message": "The input token count (2000000) exceeds the "
                "maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}},
     PromptTooLongError),
    ([{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}],
     BadRequestError)])
def test_error_bodies(body: Any, cls: type) -> None:
    error = gemini_error(400, {}, json.dumps(body).encode(), [])
    assert type(error) is cls and error.status_code == 400


@responses.activate
def test_retry_info_delay_is_honoured_and_a_json_error_under_sse_is_read() -> None:
    retry = {"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED",
                       "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                    "retryDelay": "3s"}]}}
    responses.add(responses.POST, f"{URL}:streamGenerateContent?alt=sse",
                  body=json.dumps(retry), status=429, content_type="text/event-stream")
    responses.add(responses.POST, f"{URL}:streamGenerateContent?alt=sse",
                  body=f"data: {json.dumps(_chunk([{'text': 'ok'}], finishReason='STOP'))}"
                       "\r\n\r\n", content_type="text/event-stream")
    slept: List[float] = []
    client = GeminiClient(api_key=KEY, retry_policy=RetryPolicy(max_retries=1,
                                                                sleep=slept.append))
    reply = client.create(ModelRequest(model="gemini-2.5-flash", messages=[
        {"role": "user", "content": "hi"}]))
    assert reply["content"][0]["text"] == "ok" and slept == [3.0]
    assert responses.calls[0].request.headers["x-goog-api-key"] == KEY
    assert "key" not in responses.calls[0].request.url.split("?")[1].replace("alt=sse", "")


def test_vertex_urls_and_versions(monkeypatch: Any) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_LOCATION", raising=False)
    client = VertexGeminiClient(project_id="p", access_token="ya29.abcdefgh")
    assert client.region == "global"
    assert client._model_url("gemini-2.5-flash", "generateContent") == (
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/google/"
        "models/gemini-2.5-flash:generateContent")
    beta = VertexGeminiClient(project_id="p", region="europe-west4", api_version="v1beta1",
                              access_token="ya29.abcdefgh")
    assert beta._model_url("m", "countTokens").startswith(
        "https://europe-west4-aiplatform.googleapis.com/v1beta1/projects/p/locations/"
        "europe-west4/")
    with pytest.raises(ValueError, match="api_version"):
        VertexGeminiClient(project_id="p", access_token="t", api_version="v2")
    with pytest.raises(ValueError, match="project_id"):
        monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
        VertexGeminiClient(access_token="ya29.abcdefgh")


def test_a_base_url_naming_the_other_version_is_refused_not_switched() -> None:
    base = "https://proxy.example/v1beta1"
    with pytest.raises(ValueError, match=r"ends in /v1beta1 but api_version is 'v1'"):
        VertexGeminiClient(project_id="p", access_token="t", base_url=base)
    beta = VertexGeminiClient(project_id="p", access_token="t", base_url=base,
                              api_version="v1beta1")
    assert beta._model_url("m", "generateContent").startswith(base + "/projects/p/")
    plain = VertexGeminiClient(project_id="p", access_token="t", base_url=base[:-8])
    assert plain._model_url("m", "generateContent").startswith(
        "https://proxy.example/v1/projects/p/")


def test_encoded_once_bodies_equal_whole_bodies() -> None:
    from lattice.models.entries import EntryBytes, dump
    from lattice.models.gemini_wire import gemini_request

    entries = EntryBytes()
    history: List[Dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(4):
        reply = reply_from_gemini(_chunk([{"text": f"step {turn}"}, {"functionCall": {
            "name": "f", "args": {"n": turn}}, "thoughtSignature": "c2ln"}],
            finishReason="STOP", responseId=f"r{turn}"))
        history = history + [reply, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": reply["content"][1]["id"],
             "content": str(turn)}]}]
        request = ModelRequest(model="m", messages=history)
        assert gemini_request(request, entries) == dump(gemini_body(request))
        # the last message a copy (a hook's), its call encoded in an earlier request
        copied = history[:-1] + [json.loads(json.dumps(history[-1]))]
        request = ModelRequest(model="m", messages=copied)
        sent = gemini_request(request, entries)
        assert sent == dump(gemini_body(request))
        assert b'"name":"f"' in sent and b"unknown_tool" not in sent


def test_an_empty_reply_is_an_error_and_a_stream_is_bounded_as_a_whole() -> None:
    with pytest.raises(APIConnectionError, match="no content"):
        reply_from_gemini({})
    events = "".join(f"data: {json.dumps(_chunk([{'text': 'x' * 300}]))}\r\n\r\n"
                     for _ in range(10))
    with pytest.raises(APIConnectionError, match="max_response_bytes"):
        parse_gemini_stream(iter([events.encode()]), limit=1000)


@pytest.mark.parametrize("model,nested", [("gemini-3-pro-preview", True),
                                          ("gemini-2.5-flash", False)])
def test_a_tools_images_go_in_the_result_for_gemini_3_else_after_it(model: str,
                                                                     nested: bool) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBO"}}
    history = [{"role": "user", "content": "look"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                  "name": "shot", "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                             "content": [{"type": "text", "text": "here"},
                                                         image]}]}]
    parts = gemini_body(ModelRequest(model=model, messages=history))["contents"][2]["parts"]
    inline = {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}
    response = {"name": "shot", "response": {"result": "here"}}
    if nested:
        assert parts == [{"functionResponse": {**response, "parts": [inline]}}]
    else:
        assert parts == [{"functionResponse": response}, inline]


def test_a_signature_on_the_first_piece_of_a_streamed_text_stays_on_the_whole_text() -> None:
    reply = reply_from_gemini([_chunk([{"text": "Hel", "thoughtSignature": "c2ln"}]),
                               _chunk([{"text": "lo"}]),
                               _chunk([{"text": "", "thoughtSignature": "bW9yZQ=="}],
                                      finishReason="STOP")])
    assert reply["content"] == [{"type": "text", "text": "Hello"}]
    assert gemini_contents([reply])[0]["parts"] == [
        {"text": "Hello", "thoughtSignature": "c2ln"},
        {"text": "", "thoughtSignature": "bW9yZQ=="}]


def test_vertex_without_credentials_says_what_to_install(monkeypatch: Any) -> None:
    import lattice.models.vertex as vertex

    monkeypatch.setattr(vertex, "_has_google_auth", lambda: False)
    with pytest.raises(ValueError, match="VertexGeminiClient needs access_token=.*google-auth"):
        VertexGeminiClient(project_id="p")
    with pytest.raises(ValueError, match="not both"):
        VertexGeminiClient(project_id="p", access_token="ya29.abcdefgh",
                           token_provider=lambda: "t")


@pytest.mark.parametrize("code,status", [("503", 503), (None, 500), ("x", 500), (True, 500),
                                         (429, 429), (200, 500)])
def test_an_error_chunk_with_an_odd_code_is_still_an_api_error(code: Any, status: int
                                                                ) -> None:
    from lattice.errors import APIStatusError
    from lattice.models.gemini_reply import GeminiReply

    with pytest.raises(APIStatusError) as caught:
        GeminiReply().feed({"error": {"code": code, "message": "m"}})
    assert caught.value.status_code == status


@pytest.mark.parametrize("number,stop", [(1, "end_turn"), (2, "max_tokens"), (3, "refusal"),
                                         (9, "malformed_function_call"), (10, "refusal"),
                                         (11, "refusal"), (14, "end_turn"),
                                         (15, "malformed_function_call"), (16, "end_turn")])
def test_vertex_numeric_finish_reasons_read_as_aiplatform_v1_numbers_them(number: int,
                                                                          stop: str) -> None:
    """enum-encoding=int: 11 is IMAGE_SAFETY, 14 IMAGE_OTHER, 15 UNEXPECTED_TOOL_CALL."""
    from lattice.models.gemini_reply import reply_from_gemini

    reply = reply_from_gemini({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "x"}]}, "finishReason": number}]})
    assert reply["stop_reason"] == stop
