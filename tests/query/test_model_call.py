"""One model request (lattice/query/model_call.py): the hook's private copy (#22), observers see
what is sent (SPEC 16a), at most four cache breakpoints whoever placed them (SPEC 16a);
what a request carries (SDK keys stripped, a snapshot), callable clients and hooks, a
client returning garbage."""

from __future__ import annotations

import copy
import json

import pytest
from helpers import (
    echo_tool,
    reply,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    Agent,
    Tool,
)
from lattice.observe.observer import Observer
from lattice.query.caching import MAX_BREAKPOINTS, count_cache_breakpoints
from lattice.testing import ScriptedModelClient, assert_well_formed

MARK = {"type": "ephemeral"}


def echo() -> Tool:
    return Tool("echo", "Echo.", {"type": "object", "properties": {"x": {"type": "object"}}},
                lambda a: [{"type": "text", "text": "echoed"}])


# -- the hook gets a copy of its own (#22) -----------------------------------------------------
def test_a_hook_editing_blocks_in_place_changes_neither_history_nor_later_requests():
    def hook(request):
        for message in request.messages:  # edit every level in place
            if isinstance(message["content"], list):
                for block in message["content"]:
                    if block.get("type") == "text":
                        block["text"] = "EDITED"
                    if block.get("type") == "tool_use":
                        block["input"]["x"]["deep"] = "EDITED"
                    if block.get("type") == "tool_result":
                        block["content"].append({"type": "text", "text": "EDITED"})
                message["content"].append({"type": "text", "text": "EDITED"})
        request.system[0]["text"] = "EDITED"
        request.tools[0]["description"] = "EDITED"
        request.tools[0]["input_schema"]["properties"]["x"]["type"] = "string"
        request.extra["metadata"]["user_id"] = "EDITED"

    system = [{"type": "text", "text": "Be brief."}]
    tool = echo()
    agent, client = scripted(
        [reply("thinking about it", tool_use("echo", {"x": {"deep": "orig"}}, id="t1")),
         "done", "again"],
        tools=[tool], system=system, on_model_request=hook,
        extra={"metadata": {"user_id": "u1"}})
    prompt = [{"type": "text", "text": "hello"}]
    agent.prompt(prompt)
    agent.prompt("more")
    history = json.dumps(agent.get_history())
    assert "EDITED" not in history and '"deep": "orig"' in history
    assert system == [{"type": "text", "text": "Be brief."}]
    assert prompt == [{"type": "text", "text": "hello"}]
    # The client got the edited copy; each request starts again from the originals.
    first, second = client.requests[0], client.requests[1]
    assert first.messages[0]["content"][0]["text"] == "EDITED"
    assert second.messages[0]["content"][:1] == [{"type": "text", "text": "EDITED"}]
    assert second.messages[0]["content"].count({"type": "text", "text": "EDITED"}) == 2
    assert client.requests[2].system[0]["text"] == "EDITED"
    assert tool.definition["description"] == "Echo."
    assert tool.definition["input_schema"]["properties"]["x"]["type"] == "object"
    assert client.requests[2].extra == {"metadata": {"user_id": "EDITED"}}
    assert client.requests[1].messages[-1]["content"][0]["content"] == [
        {"type": "text", "text": "echoed"}, {"type": "text", "text": "EDITED"}]


def test_without_a_hook_requests_share_the_history_dicts_and_with_one_they_do_not():
    def run(**options):
        agent, client = scripted([reply(tool_use("echo", {}, id="t1")), "done"],
                                 tools=[echo_tool()], **options)
        agent.prompt([{"type": "text", "text": "hello"}])
        return client.requests

    plain = run()
    assert plain[0].messages[0] is plain[1].messages[0]  # nothing copied: the same dict
    hooked = run(on_model_request=lambda request: None)
    assert hooked[0].messages[0] is not hooked[1].messages[0]
    assert hooked[0].messages[0]["content"] is not hooked[1].messages[0]["content"]
    assert hooked[0].messages[0] == hooked[1].messages[0]


# -- observers see what is sent (SPEC 16a) -----------------------------------------------------
class Seen(Observer):
    def __init__(self):
        self.requests = []
        self.ends = []

    def model_start(self, query, request):
        self.requests.append((request.model, copy.deepcopy(request.messages)))
        return len(self.requests)

    def model_end(self, token, reply, error):
        self.ends.append((token, error))


def switch_model(request):
    request.model = "switched-model"
    request.messages = request.messages + [{"role": "assistant", "content": "injected"},
                                           {"role": "user", "content": "and this"}]


def test_observers_get_the_request_after_the_hook():
    seen = Seen()
    agent, client = scripted(["ok"], on_model_request=switch_model, observers=[seen])
    agent.prompt("hi")
    assert client.requests[0].model == "switched-model"
    model, messages = seen.requests[0]
    assert model == "switched-model"
    assert [m["content"] for m in messages] == ["hi", "injected", "and this"]
    assert seen.ends == [(1, None)]


def test_a_hook_that_raises_sends_nothing_and_reports_no_model_request():
    seen = Seen()

    def broken(request):
        raise RuntimeError("hook bug")

    agent, client = scripted(["ok"], on_model_request=broken, observers=[seen])
    with pytest.raises(RuntimeError, match="hook bug"):
        agent.prompt("hi")
    assert client.calls == 0 and seen.requests == [] and seen.ends == []


def test_a_chat_span_names_the_model_the_hook_switched_to():
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lattice.observe.tracing import OtelObserver

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent, _ = scripted(["ok"], on_model_request=switch_model,
                        observers=[OtelObserver(tracer_provider=provider)])
    agent.prompt("hi")
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert [s.name for s in chats] == ["chat switched-model"]
    assert chats[0].attributes["gen_ai.request.model"] == "switched-model"


# -- at most four cache breakpoints, whoever placed them (SPEC 16a) -------------------------
@pytest.mark.parametrize("prompt_caching", [False, True])
def test_marks_the_caller_puts_in_every_prompt_never_pile_up_past_four(prompt_caching):
    system = [{"type": "text", "text": "Rules.", "cache_control": MARK}]
    client = ScriptedModelClient([reply(tool_use("echo", {}, id=f"t{n}")) if n % 2 == 0 else "ok"
                                  for n in range(12)])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()], system=system,
                  prompt_caching=prompt_caching)
    for n in range(6):
        agent.prompt([{"type": "text", "text": f"document {n}", "cache_control": MARK}])
    counts = [count_cache_breakpoints(r) for r in client.requests]
    assert max(counts) == MAX_BREAKPOINTS and len(counts) == 12
    last = client.requests[-1]
    # The newest prompts keep their marks; lattice added none of its own once full.
    marked = [m["content"][0]["text"] for m in last.messages
              if isinstance(m["content"], list) and m["content"][0].get("cache_control")]
    assert marked == [f"document {n}" for n in range(2, 6)]
    assert "cache_control" not in json.dumps(last.system)
    history = agent.get_history()  # the history keeps every mark the caller wrote
    assert json.dumps(history).count("cache_control") == 6
    assert system[0]["cache_control"] == MARK


def test_sdk_keys_stripped_from_requests():
    agent, client = scripted([reply("a", model="m", provider_response_id="r", usage={"input_tokens": 1}),
                          "b"])
    agent.prompt("one")
    agent.prompt("two")
    for message in client.requests[1].messages:
        assert set(message) == {"role", "content"}
    json.dumps(agent.get_history())


def test_callable_client_and_on_model_request():
    seen = []

    def fn(request):
        seen.append(request)
        return {"content": [{"type": "text", "text": request.system or "none"}]}

    def hook(request):
        if len(seen) == 0:
            request.system = "changed in place"
            return None
        return lattice.ModelRequest(model="other", messages=request.messages, system="replaced")

    agent = Agent(model="m", model_client=fn, on_model_request=hook, system="orig")
    assert agent.prompt("a").result == "changed in place"
    assert agent.prompt("b").result == "replaced" and seen[1].model == "other"


def test_request_snapshot_not_altered_by_later_history():
    agent, client = scripted(["a", "b"])
    agent.prompt("one")
    first = client.requests[0].messages
    agent.prompt("two")
    assert len(first) == 1


def test_editing_a_yielded_message_never_changes_what_is_sent_next():
    client = ScriptedModelClient([reply("calling", tool_use("echo", id="1")), "done"])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()])
    for message in agent.query("go"):
        if message.type in ("assistant", "user"):
            message.message["content"] = "tampered"
    sent = client.requests[1].messages
    assert sent[1]["content"][0]["text"] == "calling"
    assert sent[2]["content"][0]["content"] == "echo ran"
    history = agent.get_history()
    history[0]["content"] = "tampered too"
    assert agent.get_history()[0]["content"] == "go"


def test_client_returning_garbage_raises_clearly():
    agent = Agent(model="m", model_client=lambda r: 42)
    with pytest.raises(TypeError, match="expected a dict"):
        agent.prompt("x")
    # the guard is free again and the history is still well-formed
    assert_well_formed(agent.get_history())


