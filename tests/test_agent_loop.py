"""The loop of SPEC section 3: replies, tool batches, limits, usage, results."""
import json
import threading

import pytest
from helpers import (
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
    Tool,
    ToolResult,
    Usage,
    UserMessage,
    tool,
)
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def make(replies, **options):
    client = ScriptedModelClient(replies)
    options.setdefault("model", "test-model")
    return Agent(model_client=client, **options), client


def test_text_reply_is_success_with_text():
    agent, client = make(["hello ", reply("hello", " world")][1:])
    messages = list(agent.query("hi"))
    assert [m.type for m in messages] == ["assistant", "result"]
    result = messages[-1]
    assert result.subtype == "success" and result.is_error is False
    assert result.result == "hello world"
    assert result.num_turns == 1 and result.error is None
    assert client.requests[0].messages == [{"role": "user", "content": "hi"}]
    assert client.requests[0].model == "test-model"


def test_tool_loop_appends_one_user_message_per_batch():
    agent, client = make([
        reply("let me add", tool_use("add", {"a": 1, "b": 2}, "t1"),
              tool_use("add", {"a": 3, "b": 4}, "t2")),
        reply("3 and 7"),
    ], tools=[add])
    messages = list(agent.query("add things"))
    assert [m.type for m in messages] == ["assistant", "user", "assistant", "result"]
    results = messages[1].message["content"]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [("t1", "3"), ("t2", "7")]
    assert messages[-1].result == "3 and 7" and messages[-1].num_turns == 2
    history = agent.get_history()
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert client.requests[1].messages[2] == {"role": "user", "content": results}
    assert client.requests[0].tools == [add.definition]
    assert_well_formed(history)


def test_prompt_returns_result_and_multi_turn_keeps_history():
    agent, client = make(["Nice to meet you, Ada.", "Your name is Ada."])
    agent.prompt("My name is Ada.")
    result = agent.prompt("What is my name?")
    assert result.result == "Your name is Ada."
    assert [m["content"] for m in client.requests[1].messages][:2] == [
        "My name is Ada.", [{"type": "text", "text": "Nice to meet you, Ada."}]]


def test_max_turns_counts_model_requests():
    looping = reply(tool_use("add", {"a": 1, "b": 1}))
    agent, client = make([looping] * 5, tools=[add], max_turns=3)
    result = agent.prompt("loop")
    assert result.subtype == "error_max_turns" and result.is_error
    assert result.num_turns == 3 and len(client.requests) == 3
    assert_well_formed(agent.get_history())


def test_usage_summed_and_missing_usage_is_zero():
    u1 = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2}
    u2 = {"input_tokens": 20, "output_tokens": 7, "cache_creation_input_tokens": 3}
    agent, _ = make([reply(tool_use("add", {"a": 1, "b": 1}), usage=u1), reply("ok", usage=u2)],
                    tools=[add])
    result = agent.prompt("x")
    assert result.usage.to_dict() == {"input_tokens": 30, "output_tokens": 12,
                                      "cache_creation_input_tokens": 3,
                                      "cache_read_input_tokens": 2}
    agent2, _ = make(["no usage"])
    assert agent2.prompt("x").usage == lattice.Usage()


def test_stop_reason_and_provider_metadata():
    agent, client = make([reply("cut", stop_reason="max_tokens", model="served-model",
                                provider_response_id="msg_1")])
    messages = list(agent.query("x"))
    assert messages[-1].subtype == "success" and messages[-1].result == "cut"
    assert messages[-1].stop_reason == "max_tokens"
    assistant = messages[0]
    assert assistant.model == "served-model" and assistant.provider_response_id == "msg_1"
    entry = agent.get_history()[1]
    assert entry["model"] == "served-model" and entry["provider_response_id"] == "msg_1"


def test_sdk_keys_stripped_from_requests():
    agent, client = make([reply("a", model="m", provider_response_id="r", usage={"input_tokens": 1}),
                          "b"])
    agent.prompt("one")
    agent.prompt("two")
    for message in client.requests[1].messages:
        assert set(message) == {"role", "content"}
    json.dumps(agent.get_history())


def test_truncated_tool_batch_is_not_run():
    calls = []

    @tool
    def record(x: str) -> str:
        calls.append(x)
        return x

    agent, client = make([
        reply(tool_use("record", {"x": "a"}, "t1"), tool_use("record", {"x": "b"}, "t2"),
              stop_reason="max_tokens"),
        "done",
    ], tools=[record])
    result = agent.prompt("go")
    assert calls == [] and result.result == "done"
    results = agent.get_history()[2]["content"]
    assert all(b["is_error"] and "max_tokens" in b["content"] for b in results)
    assert [b["tool_use_id"] for b in results] == ["t1", "t2"]


def test_end_turn_tool_ends_after_writing_whole_batch():
    def finish(args):
        return ToolResult("final answer", end_turn=True)

    done = Tool("finish", "Finish.", {"type": "object", "properties": {}}, finish)
    agent, client = make([reply(tool_use("add", {"a": 1, "b": 2}, "t1"),
                                tool_use("finish", {}, "t2"), tool_use("add", {"a": 2, "b": 2}, "t3"))],
                         tools=[add, done])
    result = agent.prompt("x")
    assert result.subtype == "success" and result.result == "final answer"
    assert len(client.requests) == 1
    history = agent.get_history()
    assert [b["content"] for b in history[-1]["content"]] == ["3", "final answer", "4"]
    assert_well_formed(history)


def test_unknown_tool_and_handler_error_become_error_results():
    def boom(args):
        raise RuntimeError("disk on fire")

    agent, _ = make([reply(tool_use("nope", {}, "t1"), tool_use("boom", {}, "t2")), "ok"],
                    tools=[Tool("boom", "Boom.", {"type": "object"}, boom)])
    agent.prompt("x")
    first, second = agent.get_history()[2]["content"]
    assert first["is_error"] and "Unknown tool 'nope'" in first["content"]
    assert "boom" in first["content"]
    assert second["is_error"] and "RuntimeError: disk on fire" in second["content"]


def test_invalid_input_is_reported_and_handler_not_called():
    calls = []

    @tool
    def typed(count: int) -> str:
        calls.append(count)
        return "ok"

    agent, _ = make([reply(tool_use("typed", {"count": "three"}, "t1")), "ok"], tools=[typed])
    agent.prompt("x")
    block = agent.get_history()[2]["content"][0]
    assert calls == [] and block["is_error"]
    assert "Invalid input for tool 'typed'" in block["content"] and "count" in block["content"]


def test_return_values_are_normalised():
    values = {"s": "text", "d": {"k": [1, 2]}, "blocks": [{"type": "text", "text": "b"}],
              "n": None, "err": ToolResult("bad", is_error=True)}
    tools = [Tool(k, k, {"type": "object"}, (lambda v: (lambda args: v))(v)) for k, v in
             values.items()]
    agent, _ = make([reply(*[tool_use(k, {}, k) for k in values]), "ok"], tools=tools)
    agent.prompt("x")
    got = {b["tool_use_id"]: b for b in agent.get_history()[2]["content"]}
    assert got["s"]["content"] == "text"
    assert json.loads(got["d"]["content"]) == {"k": [1, 2]}
    assert got["blocks"]["content"] == [{"type": "text", "text": "b"}]
    assert got["n"]["content"] == "null"
    assert got["err"]["is_error"] is True and "is_error" not in got["s"]


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
    agent, client = make(["a", "b"])
    agent.prompt("one")
    first = client.requests[0].messages
    agent.prompt("two")
    assert len(first) == 1


def test_get_history_is_deep_copy_and_replace_history():
    agent, client = make(["a", "b"])
    agent.prompt("one")
    history = agent.get_history()
    history[0]["content"] = "mutated"
    assert agent.get_history()[0]["content"] == "one"
    agent.replace_history([{"role": "user", "content": "seed"},
                           {"role": "assistant", "content": "ok"}])
    agent.prompt("two")
    assert [m["content"] for m in client.requests[1].messages][::2] == ["seed", "two"]


def test_list_prompt_and_bad_prompt():
    agent, client = make(["a"])
    agent.prompt([{"type": "text", "text": "hi"}])
    assert client.requests[0].messages[0]["content"] == [{"type": "text", "text": "hi"}]
    with pytest.raises(ValueError, match="prompt"):
        agent.prompt(42)


def test_function_model_client_text():
    agent = Agent(model="m", model_client=FunctionModelClient(lambda r: "fn says hi"))
    assert agent.prompt("x").result == "fn says hi"


def test_client_returning_garbage_raises_clearly():
    agent = Agent(model="m", model_client=lambda r: 42)
    with pytest.raises(TypeError, match="expected a dict"):
        agent.prompt("x")
    # the guard is free again and the history is still well-formed
    assert_well_formed(agent.get_history())


def test_client_exception_propagates_and_agent_reusable():
    calls = []

    def fn(request):
        calls.append(1)
        if len(calls) == 1:
            raise lattice.AuthenticationError("bad key", status_code=401)
        return "ok"

    agent = Agent(model="m", model_client=fn)
    with pytest.raises(lattice.AuthenticationError):
        agent.prompt("x")
    assert agent.prompt("y").result == "ok"


def test_parallel_tool_calls_keep_order_and_overlap():
    import threading
    barrier = threading.Barrier(3, timeout=5)

    def slow(args):
        barrier.wait()  # only passes if all three run at once
        return args["v"]

    t = Tool("slow", "Slow.", {"type": "object", "properties": {"v": {"type": "string"}}}, slow)
    agent, _ = make([reply(*[tool_use("slow", {"v": v}, v) for v in "abc"]), "ok"], tools=[t],
                    parallel_tool_calls=True)
    agent.prompt("x")
    assert [b["content"] for b in agent.get_history()[2]["content"]] == ["a", "b", "c"]


def test_sequential_is_default_and_in_order():
    order = []
    t = Tool("rec", "Rec.", {"type": "object"}, lambda args: order.append(args["v"]) or "ok")
    agent, _ = make([reply(*[tool_use("rec", {"v": v}, v) for v in "abc"]), "ok"], tools=[t])
    agent.prompt("x")
    assert order == ["a", "b", "c"]


# -- SPEC 3 conformance ----------------------------------------------------------------------


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


