"""``MockMessagesServer`` refuses what the real API refuses (SPEC 10a), and counts tokens."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Dict, Iterator

import pytest
import requests

from lattice.errors import BadRequestError
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.testing.mock_server import MockMessagesServer

KEY = "sk-ant-mock-0123456789"
VERSION = {"anthropic-version": "2023-06-01"}


def use(id: str) -> Dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": "f", "input": {}}


def result(id: str) -> Dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": id, "content": "ok"}


GOOD: Dict[str, Any] = {
    "model": "m", "max_tokens": 64, "system": "be brief",
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},  # allowed (SPEC 3)
        {"role": "assistant", "content": [{"type": "text", "text": "x"}, use("a"), use("b")]},
        {"role": "user", "content": [result("a"), result("b"), {"type": "text", "text": "!"}]},
    ],
}


def changed(edit: Callable[[Dict[str, Any]], Any]) -> Dict[str, Any]:
    body = copy.deepcopy(GOOD)
    edit(body)
    return body


def _set(body: Dict[str, Any], index: int, **message: Any) -> None:
    body["messages"][index] = message


BAD = {
    "no model": (changed(lambda b: b.pop("model")), "model: Field required"),
    "no max_tokens": (changed(lambda b: b.pop("max_tokens")), "max_tokens: Field required"),
    "no messages": (changed(lambda b: b.pop("messages")), "messages: Field required"),
    "empty messages": (changed(lambda b: b.update(messages=[])), "at least one message"),
    "role system": (changed(lambda b: _set(b, 0, role="system", content="x")),
                    "messages.0.role: Input should be 'user' or 'assistant'"),
    "extra key": (changed(lambda b: b["messages"][1].update(name="bob")),
                  "messages.1.name: Extra inputs are not permitted"),
    "unanswered tool_use": (changed(lambda b: b["messages"][3]["content"].pop(1)),
                            "messages.2: `tool_use` ids were found without `tool_result` "
                            "blocks immediately after: b."),
    "tool_use last": (changed(lambda b: b["messages"].pop()), "messages.2: `tool_use` ids"),
    "stray tool_result": (changed(lambda b: b["messages"][3]["content"].append(result("z"))),
                          "messages.3.content: unexpected `tool_use_id` found in "
                          "`tool_result` blocks: z."),
    "tool_result after a user message": (
        changed(lambda b: _set(b, 1, role="user", content=[result("a")])),
        "messages.1.content: unexpected `tool_use_id`"),
}


@pytest.fixture
def server() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as srv:
        yield srv


def post(server: MockMessagesServer, body: Any, headers: Any = VERSION,
         path: str = "/v1/messages") -> requests.Response:
    return requests.post(server.base_url + path, data=json.dumps(body), headers=headers,
                         timeout=10)


def test_a_conforming_request_is_answered(server: MockMessagesServer) -> None:
    response = post(server, GOOD)
    assert response.status_code == 200, response.text
    assert response.json()["content"] == [{"type": "text", "text": "(mock) ok"}]


@pytest.mark.parametrize("case", sorted(BAD))
def test_refused_like_the_real_api(server: MockMessagesServer, case: str) -> None:
    body, message = BAD[case]
    server.add("never used")
    response = post(server, body)
    assert response.status_code == 400
    payload = response.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert message in payload["error"]["message"]
    assert payload["request_id"].startswith("req_")
    assert response.headers["request-id"] == payload["request_id"]
    assert server.requests == []  # not recorded, and the scripted reply is still there
    assert post(server, GOOD).json()["content"][0]["text"] == "never used"


def test_a_missing_version_header_is_refused(server: MockMessagesServer) -> None:
    response = post(server, GOOD, headers={})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "anthropic-version: header is required"


@pytest.mark.parametrize("case", sorted(BAD))
def test_strict_false_accepts_them(case: str) -> None:
    with MockMessagesServer(strict=False) as srv:
        body, _ = BAD[case]
        assert post(srv, body, headers={}).status_code == 200
        assert srv.requests == [body]


def test_the_client_sees_a_bad_request_error_with_the_request_id(
        server: MockMessagesServer) -> None:
    client = AnthropicClient(KEY, server.base_url)
    messages = [{"role": "assistant", "content": [use("t")]}]
    with pytest.raises(BadRequestError, match="`tool_use` ids were found") as info:
        client.create(ModelRequest(model="m", messages=messages))
    assert info.value.status_code == 400 and info.value.request_id.startswith("req_mock_")
    assert info.value.body["request_id"] == info.value.request_id


def test_every_error_body_carries_its_request_id(server: MockMessagesServer) -> None:
    server.add(MockMessagesServer.error(429, "slow down"))
    response = post(server, GOOD)
    assert response.status_code == 429
    assert response.json()["request_id"] == response.headers["request-id"]


def test_count_tokens(server: MockMessagesServer) -> None:
    body = {"model": "m", "messages": GOOD["messages"], "system": "be brief",
            "tools": [{"name": "f", "input_schema": {"type": "object"}}]}
    response = post(server, body, path="/v1/messages/count_tokens")
    assert response.status_code == 200, response.text
    counted = {k: body[k] for k in ("system", "messages", "tools")}
    expected = len(json.dumps(counted, ensure_ascii=False, separators=(",", ":"))) // 4
    assert response.json() == {"input_tokens": expected}
    assert server.requests == []  # counting is not a messages request
    bigger = dict(body, messages=body["messages"] + [{"role": "user", "content": "x" * 400}])
    assert post(server, bigger, path="/v1/messages/count_tokens").json()[
        "input_tokens"] == pytest.approx(expected + 100, abs=10)  # + its own keys


def test_count_tokens_needs_no_max_tokens_but_is_checked_too(
        server: MockMessagesServer) -> None:
    path = "/v1/messages/count_tokens"
    assert post(server, {"model": "m", "messages": []}, path=path).status_code == 400
    assert post(server, {"messages": GOOD["messages"]}, path=path).status_code == 400
    assert post(server, {"model": "m", "messages": GOOD["messages"]}, headers={},
                path=path).status_code == 400
    with MockMessagesServer(strict=False) as srv:
        assert post(srv, {"messages": []}, headers={}, path=path).json() == {
            "input_tokens": 3}
