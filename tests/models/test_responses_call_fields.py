"""Responses ``function_call`` items keep every field the API sent (SPEC 21b): a
``namespace``, any field added later, and the usual ones go back unchanged in the next
request, against the mock (which echoes what it got)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from endless_server import EndlessServer, http_response

from lattice import OpenAIResponsesClient
from lattice.models.base import ModelRequest
from lattice.models.responses_wire import reply_from_response, responses_body

CALL = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "lookup",
        "arguments": "{\"q\": \"x\"}", "status": "completed", "namespace": "crm",
        "future_field": {"kept": [1, 2]}}


def _next_input(reply: Dict[str, Any]) -> List[Dict[str, Any]]:
    history: List[Dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": reply["content"],
         **({"openai_items": reply["openai_items"]} if "openai_items" in reply else {})},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                      "content": "found"}]}]
    body = responses_body(ModelRequest(model="m", messages=history), stream=False,
                          store=False)[0]
    return json.loads(body)["input"]  # type: ignore[no-any-return]


def test_a_function_calls_namespace_and_unknown_fields_go_back_unchanged() -> None:
    reply = reply_from_response({"id": "r", "model": "m", "status": "completed",
                                 "output": [CALL]})
    assert reply["content"] == [{"type": "tool_use", "id": "call_1", "name": "lookup",
                                 "input": {"q": "x"}}]
    sent = [item for item in _next_input(reply) if item.get("type") == "function_call"]
    assert len(sent) == 1
    item = dict(sent[0])
    assert json.loads(item.pop("arguments")) == {"q": "x"}
    assert item == {k: v for k, v in CALL.items() if k != "arguments"}


@pytest.mark.parametrize("stream", [False, True])
def test_over_http_the_next_request_carries_the_namespace(stream: bool) -> None:
    response = {"id": "r", "object": "response", "model": "m", "status": "completed",
                "output": [CALL], "usage": {"input_tokens": 1, "output_tokens": 1}}
    if stream:
        events = [{"type": "response.created", "response": dict(response, output=[],
                                                                 status="in_progress")},
                  {"type": "response.output_item.done", "output_index": 0, "item": CALL},
                  {"type": "response.completed", "response": response}]
        answer = http_response(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n"
                                         for e in events), kind="text/event-stream")
    else:
        answer = http_response(response)
    with EndlessServer("json", lambda raw: answer) as server:
        client = OpenAIResponsesClient(api_key="k" * 20, base_url=server.url, stream=stream)
        reply = client.create(ModelRequest(model="m", messages=[{"role": "user",
                                                                 "content": "hi"}]))
        assert "namespace" in json.dumps(reply.get("openai_items"))
        sent = [item for item in _next_input(reply) if item.get("type") == "function_call"]
    assert sent[0]["namespace"] == "crm" and sent[0]["future_field"] == {"kept": [1, 2]}
