"""SPEC conformance, sections 1-3 (public surface, options, the loop), written from SPEC.md.

Other sections: test_spec_conformance_{tools,cancel,stores,compaction,schema,client}.py.
"""

import json
import subprocess
import sys
import threading

import pytest
from helpers import (
    MODEL,
    assert_well_formed,
    function_agent,
    reply,
    result_text,
    results_of,
    run,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    Agent,
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    Tool,
    Usage,
    UserMessage,
    create_agent,
)
from lattice.testing import FunctionModelClient, ScriptedModelClient

# -- 1. public surface --------------------------------------------------------------------

PUBLIC = """Agent create_agent tool Tool ToolResult ToolContext AbortController AbortSignal
ModelClient ModelRequest AnthropicClient HistoryStore define_history_store
create_jsonl_history_store JsonlHistoryStore SqliteHistoryStore MemoryHistoryStore AutoCompact
DEFAULT_COMPACTION_PROMPT OutputSchema SUBMIT_OUTPUT_TOOL_NAME Usage AssistantMessage
UserMessage SystemMessage ResultMessage StreamEvent LatticeError ConcurrentQueryError
MissingOutputError RequestTimeoutError AbortError APIError APIConnectionError APIStatusError
AuthenticationError PermissionDeniedError NotFoundError RateLimitError OverloadedError
InternalServerError BadRequestError PromptTooLongError HistoryStoreError SchemaError""".split()


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_importable(name):
    assert getattr(lattice, name) is not None


def test_submodules_names():
    import lattice.schema as schema
    import lattice.testing as testing

    for name in ("ScriptedModelClient", "FunctionModelClient", "MockMessagesServer"):
        assert getattr(testing, name)
    for name in ("validate", "is_valid", "compile", "ValidationError", "schema_from_type",
                 "schema_from_function"):
        assert getattr(schema, name)
    assert lattice.SUBMIT_OUTPUT_TOOL_NAME == "submit_output"


TREE = {
    "ConcurrentQueryError": "LatticeError", "MissingOutputError": "LatticeError",
    "RequestTimeoutError": "LatticeError", "AbortError": "LatticeError",
    "HistoryStoreError": "LatticeError", "SchemaError": "LatticeError",
    "APIError": "LatticeError", "APIConnectionError": "APIError",
    "APIStatusError": "APIError", "BadRequestError": "APIStatusError",
    "PromptTooLongError": "BadRequestError", "AuthenticationError": "APIStatusError",
    "PermissionDeniedError": "APIStatusError", "NotFoundError": "APIStatusError",
    "RateLimitError": "APIStatusError", "InternalServerError": "APIStatusError",
    "OverloadedError": "APIStatusError", "LatticeError": "Exception",
}


@pytest.mark.parametrize("child,parent", sorted(TREE.items()))
def test_error_tree(child, parent):
    base = Exception if parent == "Exception" else getattr(lattice, parent)
    assert issubclass(getattr(lattice, child), base)


def test_error_extra_bases():
    assert issubclass(lattice.RequestTimeoutError, TimeoutError)
    assert issubclass(lattice.SchemaError, ValueError)


@pytest.mark.parametrize("name", ["APIError", "APIConnectionError", "APIStatusError",
                                  "BadRequestError", "PromptTooLongError",
                                  "AuthenticationError", "PermissionDeniedError",
                                  "NotFoundError", "RateLimitError", "InternalServerError",
                                  "OverloadedError"])
def test_api_errors_constructible_by_custom_clients(name):
    cls = getattr(lattice, name)
    err = cls("boom happened", status_code=418, request_id="req_1", body={"x": 1})
    assert "boom happened" in str(err)
    if issubclass(cls, lattice.APIStatusError):
        assert (err.status_code, err.request_id, err.body) == (418, "req_1", {"x": 1})
    plain = cls("just a message")
    assert isinstance(plain, lattice.LatticeError)


def test_requests_not_imported_by_the_core():
    code = ("import sys, lattice\n"
            "from lattice.testing import ScriptedModelClient\n"
            "a = lattice.Agent(model='m', model_client=ScriptedModelClient(['ok']))\n"
            "assert a.prompt('hi').result == 'ok'\n"
            "print('requests' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# -- 2. options ------------------------------------------------------------------------------

def test_create_agent_takes_the_same_options():
    client = ScriptedModelClient(["hello"])
    agent = create_agent(model=MODEL, model_client=client, system="be brief", max_turns=3)
    assert isinstance(agent, Agent)
    assert agent.prompt("hi").result == "hello"
    assert client.requests[0].system == "be brief"


def test_model_client_may_be_a_plain_callable_and_model_optional():
    seen = []

    def client(request):
        seen.append(request)
        return {"role": "assistant", "content": [{"type": "text", "text": "yo"}],
                "stop_reason": "end_turn"}

    agent = Agent(model_client=client)
    assert agent.prompt("hi").result == "yo"
    assert len(seen) == 1


def test_max_tokens_default_and_option():
    agent, client = scripted(["a"])
    agent.prompt("hi")
    assert client.requests[0].max_tokens == 8192
    agent, client = scripted(["a"], max_tokens=123)
    agent.prompt("hi")
    assert client.requests[0].max_tokens == 123


def test_max_turns_default_is_50():
    @lattice.tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    agent, client = function_agent(lambda r: reply(tool_use("noop")), tools=[noop])
    result = agent.prompt("loop")
    assert result.subtype == "error_max_turns"
    assert len(client.requests) == 50
    assert result.num_turns == 50


@pytest.mark.parametrize("option,value", [
    ("max_turns", 0), ("max_turns", -1),
    ("request_timeout_ms", 0), ("request_timeout_ms", -5), ("request_timeout_ms", True),
    ("request_timeout_ms", 1.5), ("request_timeout_ms", "100"),
])
def test_bad_options_raise_value_error_naming_option_and_value(option, value):
    with pytest.raises(ValueError) as info:
        Agent(model=MODEL, model_client=ScriptedModelClient([]), **{option: value})
    assert option in str(info.value)
    assert repr(value) in str(info.value) or str(value) in str(info.value)


@pytest.mark.parametrize("auto_compact", [
    {"threshold_tokens": 0}, {"threshold_tokens": -10},
])
def test_bad_compaction_threshold_dict(auto_compact):
    with pytest.raises(ValueError, match="threshold_tokens"):
        Agent(model=MODEL, model_client=ScriptedModelClient([]), auto_compact=auto_compact)


@pytest.mark.parametrize("value", [0, -1])
def test_bad_compaction_threshold_object(value):
    with pytest.raises(ValueError, match="threshold_tokens"):
        Agent(model=MODEL, model_client=ScriptedModelClient([]),
              auto_compact=lattice.AutoCompact(threshold_tokens=value))


def test_duplicate_tool_names_rejected():
    def h(_input):
        return "x"

    t1 = Tool("same", "one", {"type": "object"}, h)
    t2 = Tool("same", "two", {"type": "object"}, h)
    with pytest.raises(ValueError, match="same"):
        Agent(model=MODEL, model_client=ScriptedModelClient([]), tools=[t1, t2])
    agent = Agent(model=MODEL, model_client=ScriptedModelClient([]), tools=[t1])
    with pytest.raises(ValueError, match="same"):
        agent.add_tools(t2)


def test_tools_option_and_add_tools_reach_the_request():
    @lattice.tool
    def alpha(x: int) -> int:
        """Alpha tool."""
        return x

    beta = Tool("beta", "Beta tool.", {"type": "object", "properties": {}}, lambda i: "b")
    agent, client = scripted(["a", "b"], tools=(t for t in [alpha]))
    agent.prompt("hi")
    assert [t["name"] for t in client.requests[0].tools] == ["alpha"]
    agent.add_tools(beta)
    agent.prompt("again")
    names = [t["name"] for t in client.requests[1].tools]
    assert sorted(names) == ["alpha", "beta"]
    for definition in client.requests[1].tools:
        assert set(definition) == {"name", "description", "input_schema"}


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


def test_parallel_tool_calls_run_concurrently_results_in_order():
    barrier = threading.Barrier(2, timeout=5)

    @lattice.tool
    def slow(tag: str) -> str:
        """Waits for its sibling."""
        barrier.wait()
        return tag

    agent, _ = scripted([reply(tool_use("slow", {"tag": "A"}, "t1"), tool_use("slow", {"tag": "B"}, "t2")),
                         "end"], tools=[slow], parallel_tool_calls=True)
    result = agent.prompt("go")
    assert result.subtype == "success"
    blocks = results_of(agent.get_history()[2])
    assert [b["tool_use_id"] for b in blocks] == ["t1", "t2"]
    assert [result_text(b) for b in blocks] == ["A", "B"]
    assert not any(b.get("is_error") for b in blocks)


def test_sequential_tool_calls_by_default():
    log = []

    @lattice.tool
    def step(tag: str) -> str:
        """Logs."""
        log.append(("start", tag, threading.current_thread().name))
        log.append(("end", tag))
        return tag

    agent, _ = scripted([reply(tool_use("step", {"tag": "A"}, "t1"), tool_use("step", {"tag": "B"}, "t2")),
                         "end"], tools=[step])
    agent.prompt("go")
    assert [(e[0], e[1]) for e in log] == [("start", "A"), ("end", "A"),
                                             ("start", "B"), ("end", "B")]


# -- 3. the loop -----------------------------------------------------------------------------

def test_text_reply_yields_assistant_then_success_result():
    agent, client = scripted([reply("Hello, ", "world", usage={"input_tokens": 5,
                                                             "output_tokens": 2})])
    messages = run(agent, "hi")
    assert [type(m) for m in messages] == [AssistantMessage, ResultMessage]
    a, r = messages
    assert a.type == "assistant" and r.type == "result"
    assert r.subtype == "success" and r.is_error is False
    assert r.result == "Hello, world"
    assert r.structured_result is None and r.error is None
    assert r.stop_reason == "end_turn"
    assert r.num_turns == 1
    assert isinstance(r.duration_ms, int) and r.duration_ms >= 0
    assert r.usage == Usage(input_tokens=5, output_tokens=2)
    history = agent.get_history()
    assert history[0] == {"role": "user", "content": "hi"}
    assert history[1]["role"] == "assistant"
    assert len(history) == 2
    assert client.requests[0].messages == [{"role": "user", "content": "hi"}]


def test_prompt_may_be_content_blocks():
    blocks = [{"type": "text", "text": "look"}, {"type": "text", "text": " here"}]
    agent, client = scripted(["ok"])
    assert agent.prompt(blocks).result == "ok"
    assert agent.get_history()[0] == {"role": "user", "content": blocks}
    assert client.requests[0].messages[0] == {"role": "user", "content": blocks}


def test_tool_loop_message_order_and_one_user_message_per_batch():
    @lattice.tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    agent, client = scripted([
        reply("let me add", tool_use("add", {"a": 1, "b": 2}, "t1"), tool_use("add", {"a": 3, "b": 4}, "t2")),
        reply("3 and 7"),
    ], tools=[add])
    messages = run(agent, "add things")
    assert [m.type for m in messages] == ["assistant", "user", "assistant", "result"]
    assert isinstance(messages[1], UserMessage)
    blocks = results_of(messages[1].message)
    assert [b["tool_use_id"] for b in blocks] == ["t1", "t2"]
    assert [result_text(b) for b in blocks] == ["3", "7"]
    assert messages[-1].result == "3 and 7" and messages[-1].num_turns == 2
    history = agent.get_history()
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[2] == messages[1].message
    assert len(client.requests) == 2
    assert client.requests[1].messages[2]["content"] == history[2]["content"]


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


def test_result_usage_is_the_sum_and_stop_reason_is_the_last():
    agent, _ = scripted([
        reply(tool_use("x", {}, "t1"), usage={"input_tokens": 10, "output_tokens": 1,
                                         "cache_read_input_tokens": 4}),
        reply("done", stop_reason="end_turn",
              usage={"input_tokens": 20, "output_tokens": 2, "cache_creation_input_tokens": 3}),
    ])
    r = agent.prompt("hi")
    assert r.usage.to_dict() == {"input_tokens": 30, "output_tokens": 3,
                                 "cache_creation_input_tokens": 3,
                                 "cache_read_input_tokens": 4}
    assert r.stop_reason == "end_turn"


def test_usage_ops():
    u = Usage()
    assert (u.input_tokens, u.output_tokens, u.cache_creation_input_tokens,
            u.cache_read_input_tokens) == (0, 0, 0, 0)
    s = Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40)
    assert isinstance(s, Usage)
    assert s.to_dict() == {"input_tokens": 11, "output_tokens": 22,
                           "cache_creation_input_tokens": 33, "cache_read_input_tokens": 44}
    json.dumps(s.to_dict())


def test_client_without_usage_gives_zeros():
    agent, _ = function_agent(lambda r: {"role": "assistant",
                                         "content": [{"type": "text", "text": "x"}]})
    messages = run(agent)
    assert messages[-1].subtype == "success"
    assert messages[-1].usage.to_dict() == Usage().to_dict()
    assert messages[0].usage == Usage()


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


def test_multi_turn_sends_the_whole_history():
    agent, client = scripted(["My name is noted.", "Ada"])
    agent.prompt("My name is Ada.")
    assert agent.prompt("What is my name?").result == "Ada"
    assert [m["content"] if isinstance(m["content"], str) else "A"
            for m in client.requests[1].messages] == ["My name is Ada.", "A", "What is my name?"]


def test_get_history_is_a_deep_copy():
    agent, _ = scripted([reply("x", tool_use("t", {"k": [1]}, "t1")), "y"])
    agent.prompt("hi")
    copy = agent.get_history()
    copy[1]["content"][1]["input"]["k"].append(2)
    copy.append({"role": "user", "content": "junk"})
    fresh = agent.get_history()
    assert fresh[1]["content"][1]["input"] == {"k": [1]}
    assert len(fresh) == 4


def test_max_turns_result():
    @lattice.tool
    def again() -> str:
        """Again."""
        return "more"

    agent, client = function_agent(lambda r: reply("step", tool_use("again", {}, f"t{len(r.messages)}")),
                                   tools=[again], max_turns=3)
    messages = run(agent)
    r = messages[-1]
    assert r.subtype == "error_max_turns" and r.is_error is True
    assert r.num_turns == 3 and len(client.requests) == 3
    assert r.result == "step"
    assert_well_formed(agent.get_history())


def test_max_turns_result_carries_an_exception():
    agent, _ = function_agent(lambda r: reply("step", tool_use("again", {}, f"t{len(r.messages)}")),
                              tools=[lattice.tool(lambda: "more", name="again")], max_turns=1)
    r = agent.prompt("hi")
    assert r.subtype == "error_max_turns"
    assert isinstance(r.error, BaseException)


def test_provider_errors_raise_from_prompt_and_query():
    def fail(request):
        raise lattice.AuthenticationError("bad key", status_code=401)

    agent, _ = function_agent(fail)
    with pytest.raises(lattice.AuthenticationError):
        agent.prompt("hi")
    with pytest.raises(lattice.AuthenticationError):
        run(agent, "again")
    assert_well_formed(agent.get_history())
    assert all(m["role"] == "user" for m in agent.get_history())


def test_scripted_client_strings_and_requests():
    client = ScriptedModelClient(["first", reply("second")])
    agent = Agent(model=MODEL, model_client=client)
    assert agent.prompt("a").result == "first"
    assert agent.prompt("b").result == "second"
    assert len(client.requests) == 2
    assert isinstance(client.requests[0], lattice.ModelRequest)


def test_function_client_may_return_a_str():
    client = FunctionModelClient(lambda r: f"echo {len(r.messages)}")
    agent = Agent(model=MODEL, model_client=client)
    assert agent.prompt("a").result == "echo 1"


def test_model_required_without_a_client():
    with pytest.raises(ValueError, match="model"):
        Agent(api_key="k")
