"""What query() yields and what history keeps (lattice/messages.py, SPEC 3)."""
import json

from helpers import (
    function_agent,
    reply,
    run,
    scripted,
    tool_use,
)

from lattice import (
    StreamEvent,
    Usage,
)


def _events_client(request):
    if request.on_event is not None:
        request.on_event({"type": "message_start", "message": {"id": "m1"}})
        request.on_event({"type": "message_stop"})
    return reply("done")


def test_include_partial_messages_yields_stream_events_before_the_reply():
    agent, _ = function_agent(_events_client, include_partial_messages=True)
    messages = run(agent)
    kinds = [m.type for m in messages]
    assert kinds == ["stream_event", "stream_event", "assistant", "result"]
    assert isinstance(messages[0], StreamEvent)
    assert messages[0].event == {"type": "message_start", "message": {"id": "m1"}}


def test_no_stream_events_by_default():
    agent, _ = function_agent(_events_client)
    assert [m.type for m in run(agent)] == ["assistant", "result"]


def test_assistant_message_shortcuts():
    usage = {"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 2,
             "cache_read_input_tokens": 1}
    agent, _ = scripted([reply("hi", tool_use("nope", {}, "t1"), usage=usage, model="served-model",
                               provider_response_id="msg_123"), "bye"])
    a = run(agent)[0]
    assert a.message == agent.get_history()[1]
    assert a.content == a.message["content"]
    assert a.text == "hi"
    assert [b["id"] for b in a.tool_uses] == ["t1"]
    assert a.stop_reason == "tool_use"
    assert a.usage == Usage(10, 3, 2, 1)
    assert a.model == "served-model"
    assert a.provider_response_id == "msg_123"


def test_history_keeps_model_and_provider_response_id_and_strips_sdk_keys():
    agent, client = scripted([
        reply("one", model="m-served", provider_response_id="msg_1",
              usage={"input_tokens": 1, "output_tokens": 1}),
        "two",
    ])
    agent.prompt("a")
    history = agent.get_history()
    assert history[1]["model"] == "m-served"
    assert history[1]["provider_response_id"] == "msg_1"
    json.dumps(history)
    agent.prompt("b")
    for message in client.requests[1].messages:
        assert set(message) == {"role", "content"}
    assert client.requests[1].messages[1] == {"role": "assistant",
                                              "content": [{"type": "text", "text": "one"}]}


def test_history_omits_metadata_the_client_did_not_report():
    agent, _ = function_agent(lambda r: {"role": "assistant",
                                         "content": [{"type": "text", "text": "x"}]})
    agent.prompt("a")
    assert agent.get_history()[1].get("model") is None
    assert agent.get_history()[1].get("provider_response_id") is None
