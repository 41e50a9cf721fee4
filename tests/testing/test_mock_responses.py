"""MockMessagesServer's /v1/responses and Azure routes: refusals like the real services."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest
import requests

from lattice.testing import MockMessagesServer
from lattice.testing._mock_responses_checks import encrypt

USER = {"role": "user", "content": "hi"}
CALL = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": encrypt("rs_1")}


def _post(server: MockMessagesServer, body: Dict[str, Any], path: str = "/v1/responses",
          headers: Optional[Dict[str, str]] = None) -> requests.Response:
    return requests.post(server.base_url + path, json=body, headers=headers, timeout=10)


@pytest.mark.parametrize("body, status, words", [
    ({"input": [USER]}, 400, "Missing required parameter: 'model'"),
    ({"model": "m", "input": [USER], "max_tokens": 5}, 400, "Unknown parameter: 'max_tokens'"),
    ({"model": "m", "input": [USER], "max_output_tokens": 5}, 400, ">= 16"),
    ({"model": "m", "input": [USER, CALL]}, 400, "No tool output found for function call"),
    ({"model": "m", "input": [USER, OUTPUT]}, 400, "No tool call found for function call "
                                                   "output with call_id call_1"),
    ({"model": "m", "input": [USER, REASONING]}, 400, "without its required following item"),
    ({"model": "m", "store": False, "input": [USER, dict(REASONING, encrypted_content=None),
                                              CALL, OUTPUT]}, 404, "not persisted"),
    ({"model": "m", "input": [USER, dict(REASONING, encrypted_content="forged"), CALL,
                              OUTPUT]}, 400, "could not be verified"),
    ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, 400, "Invalid value: 'tool'"),
    ({"model": "m", "input": [{"role": "assistant", "content": [
        {"type": "input_text", "text": "x"}]}]}, 400, "'output_text' and 'refusal'"),
    ({"model": "m", "input": [USER], "text": {"format": {"type": "json_schema",
                                                         "schema": {}}}},
     400, "text.format.name"),
    ({"model": "m", "input": [USER], "tools": [{"type": "function", "name": "f",
                                                "parameters": {"type": "object",
                                                               "properties": {}}}]},
     400, "'additionalProperties' is required"),
    ({"model": "m", "input": [USER], "include": ["everything"]}, 400, "Invalid value"),
])
def test_refused_like_the_real_api(body: Dict[str, Any], status: int, words: str) -> None:
    with MockMessagesServer(["never used"]) as server:
        response = _post(server, body)
        assert response.status_code == status, response.text
        assert words in response.json()["error"]["message"]
        assert server.requests == []  # not recorded, no reply used up
        assert _post(server, {"model": "m", "input": [USER, REASONING, CALL, OUTPUT]}
                     ).json()["output"][0]["content"][0]["text"] == "never used"


def test_not_strict_accepts_anything() -> None:
    with MockMessagesServer(["fine"], strict=False) as server:
        assert _post(server, {"model": "m", "input": [USER, CALL]}).status_code == 200


def test_scripts_see_the_request_in_messages_shape() -> None:
    seen: List[Dict[str, Any]] = []

    def script(body: Dict[str, Any]) -> str:
        seen.append(body)
        return "ok"

    with MockMessagesServer([script]) as server:
        _post(server, {"model": "m", "instructions": "sys", "input": [
            USER, {"role": "assistant", "content": "a"}, CALL, OUTPUT],
            "tools": [{"type": "function", "name": "f", "strict": False,
                       "parameters": {"type": "object"}}]})
    view = seen[0]
    assert view["system"] == "sys"
    assert view["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "ok"}]}]
    assert view["tools"] == [{"name": "f", "description": "", "input_schema": {
        "type": "object"}}]


def test_azure_routes_want_credentials_and_api_version() -> None:
    chat = {"model": "d", "messages": [USER]}
    with MockMessagesServer(["a", "b", "c"]) as server:
        path = "/openai/deployments/gpt4o/chat/completions"
        assert _post(server, chat, path + "?api-version=2024-10-21").status_code == 401
        assert _post(server, chat, path, {"api-key": "k"}).status_code == 404
        ok = _post(server, chat, path + "?api-version=2024-10-21", {"api-key": "k"})
        assert ok.json()["choices"][0]["message"]["content"] == "a"
        body = {"model": "d", "input": [USER]}
        assert _post(server, body, "/openai/v1/responses").status_code == 401
        bearer = {"authorization": "Bearer tok"}
        assert _post(server, body, "/openai/v1/responses", bearer).status_code == 200
        assert _post(server, body, "/openai/responses", bearer).status_code == 404
        assert _post(server, body, "/openai/responses?api-version=2025-04-01-preview",
                     bearer).status_code == 200
