"""ModelRequest and on_model_request (lattice/models/base.py, SPEC 6)"""
import dataclasses
import json

import pytest
from helpers import function_agent, reply, run, scripted, tool_use

from lattice import (
    ModelRequest,
    Tool,
)

# -- ModelRequest and on_model_request (lattice/models/base.py, SPEC 6) ----------------------


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_model_request_is_a_mutable_dataclass_with_defaults():
    assert dataclasses.is_dataclass(ModelRequest)
    names = {f.name for f in dataclasses.fields(ModelRequest)}
    assert {"model", "system", "messages", "tools", "max_tokens", "signal", "timeout_ms",
            "on_event", "extra"} <= names
    r = ModelRequest(model="m", messages=[])
    assert r.timeout_ms is None and r.on_event is None
    assert r.tools in ([], None) and r.extra in ({}, None)
    r.max_tokens = 5  # not frozen
    assert r.max_tokens == 5


def test_each_call_gets_a_new_request_with_a_snapshot_of_messages():
    agent, c = scripted([reply(tool_use("t", {}, "1")), "two", "three"],
                        tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    agent.prompt("a")
    agent.prompt("b")
    r0, r1, r2 = c.requests
    assert r0 is not r1 and r0.messages is not r1.messages and r1.messages is not r2.messages
    assert len(r0.messages) == 1 and len(r1.messages) == 3 and len(r2.messages) == 5
    agent.replace_history([])
    assert len(r0.messages) == 1 and len(r2.messages) == 5
    for r in c.requests:
        assert all(set(m) == {"role", "content"} for m in r.messages)


def test_on_model_request_in_place_affects_only_that_request():
    calls = []

    def hook(req):
        calls.append(req)
        if len(calls) == 1:
            req.system = "changed system"
            req.messages = req.messages + [{"role": "assistant", "content": "injected"},
                                           {"role": "user", "content": "more"}]
            req.max_tokens = 77
        return None

    agent, c = scripted(["one", "two"], system="orig", on_model_request=hook)
    agent.prompt("a")
    agent.prompt("b")
    assert c.requests[0].system == "changed system" and c.requests[0].max_tokens == 77
    assert len(c.requests[0].messages) == 3
    assert c.requests[1].system == "orig" and c.requests[1].max_tokens == 8192
    assert "injected" not in json.dumps(agent.get_history())
    assert len(c.requests[1].messages) == 3


def test_on_model_request_replacement():
    def hook(req):
        return dataclasses.replace(req, system="replacement", extra={"temperature": 0})

    agent, c = scripted(["one"], system="orig", on_model_request=hook)
    agent.prompt("a")
    assert c.requests[0].system == "replacement" and c.requests[0].extra == {"temperature": 0}


def test_client_reply_dict_keys_reach_history():
    agent, _ = function_agent(lambda r: {
        "role": "assistant", "content": [{"type": "text", "text": "x"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1}, "model": "mm",
        "provider_response_id": "id9"})
    messages = run(agent)
    assert messages[0].model == "mm" and messages[0].provider_response_id == "id9"
