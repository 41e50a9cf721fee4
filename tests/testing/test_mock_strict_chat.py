"""``MockMessagesServer``'s Chat Completions route refuses what the real API refuses
(SPEC 16a), in OpenAI's error shape, so a client bug cannot pass the tests."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Dict, Iterator

import pytest
import requests

from lattice.errors import BadRequestError
from lattice.models.base import ModelRequest
from lattice.models.openai import OpenAIChatClient
from lattice.testing.mock_server import MockMessagesServer


def call(id: str) -> Dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


GOOD: Dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "ok"},  # any order
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "developer", "content": "go on"},
        {"role": "user", "content": [{"type": "text", "text": "and?"}]},
        {"role": "user", "content": "again"},  # two user messages in a row: accepted
    ],
}


def changed(edit: Callable[[Dict[str, Any]], Any]) -> Dict[str, Any]:
    body = copy.deepcopy(GOOD)
    edit(body)
    return body


BAD = {
    "empty messages": (changed(lambda b: b.update(messages=[])), "messages", "empty array"),
    "no messages": (changed(lambda b: b.pop("messages")), "messages",
                    "Missing required parameter"),
    "unknown role": (changed(lambda b: b["messages"][1].update(role="human")),
                     "messages[1].role", "Invalid value: 'human'"),
    "tool without tool_calls before it": (
        changed(lambda b: b["messages"].insert(2, {"role": "tool", "tool_call_id": "a",
                                                   "content": "x"})),
        "messages[2].role", "must be a response to a preceeding message with 'tool_calls'"),
    "tool with an id nobody asked for": (
        changed(lambda b: b["messages"][3].update(tool_call_id="zz")),
        "messages[3].tool_call_id", "'tool_call_id' of 'zz' not found"),
    "tool without tool_call_id": (changed(lambda b: b["messages"][3].pop("tool_call_id")),
                                  "messages[3].tool_call_id", "Missing required parameter"),
    "unanswered call before a user message": (
        changed(lambda b: b["messages"].pop(4)), "messages.[2].role",
        "did not have response messages: a"),
    "unanswered calls at the end": (
        changed(lambda b: b.update(messages=b["messages"][:3])), "messages.[2].role",
        "did not have response messages: a, b"),
    "unanswered call before an assistant message": (
        changed(lambda b: b["messages"].__setitem__(4, {"role": "assistant",
                                                        "content": "x"})),
        "messages.[2].role", "response messages: a"),
}


@pytest.fixture
def server() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as srv:
        yield srv


def post(server: MockMessagesServer, body: Any) -> requests.Response:
    return requests.post(server.base_url + "/v1/chat/completions", data=json.dumps(body),
                         timeout=10)


def test_a_conforming_request_is_answered(server: MockMessagesServer) -> None:
    response = post(server, GOOD)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "(mock) ok"


@pytest.mark.parametrize("case", sorted(BAD))
def test_refused_like_the_real_api(server: MockMessagesServer, case: str) -> None:
    body, param, message = BAD[case]
    server.add("never used")
    response = post(server, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert message in error["message"]
    assert response.headers["x-request-id"].startswith("req_mock_")
    assert server.requests == []  # not recorded, and the scripted reply is still there
    assert post(server, GOOD).json()["choices"][0]["message"]["content"] == "never used"


@pytest.mark.parametrize("case", sorted(BAD))
def test_strict_false_accepts_them(case: str) -> None:
    body, _, _ = BAD[case]
    with MockMessagesServer(strict=False) as srv:
        response = post(srv, body)
        assert response.status_code == 200, response.text
        assert srv.requests == [body]


def test_the_client_sees_a_bad_request_error(server: MockMessagesServer) -> None:
    client = OpenAIChatClient("sk-mock", server.base_url, stream=False)
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t",
                                                   "name": "f", "input": {}}]}]
    with pytest.raises(BadRequestError, match="did not have response messages: t") as info:
        client.create(ModelRequest(model="m", messages=messages))
    assert info.value.status_code == 400 and info.value.request_id.startswith("req_mock_")
