"""End to end over real HTTP: Agent + AnthropicClient + MockMessagesServer on 127.0.0.1."""
import threading
import time

from helpers import lookup, lookup_call

from lattice import AbortController, Agent, AnthropicClient, AutoCompact
from lattice.testing import MockMessagesServer, assert_well_formed


def test_prompt_too_long_once_then_recovered_by_compaction():
    summary = {"content": [{"type": "text", "text": "SUMMARY: looked up k twice"}]}
    script = [lookup_call, lookup_call,
              MockMessagesServer.error(400, "prompt is too long: 250000 tokens > 200000 maximum"),
              summary, "all done"]
    with MockMessagesServer(script) as server:
        agent = Agent(model="m", model_client=AnthropicClient(api_key="k", base_url=server.base_url),
                      tools=[lookup], auto_compact=AutoCompact(threshold_tokens=10**9,
                                                               keep_recent_messages=2))
        messages = list(agent.query("start"))
        result = messages[-1]
        assert result.subtype == "success" and result.result == "all done"
        assert [m.type for m in messages].count("system") == 1
        summary_request = server.requests[3]
        assert "tools" not in summary_request or summary_request["tools"] == []
        retried = server.requests[4]
        assert "SUMMARY" in str(retried["messages"][0]["content"])
        assert_well_formed(retried["messages"], strict_roles=True)


def test_streaming_tool_loop_with_partial_messages():
    with MockMessagesServer([lookup_call, "final answer"]) as server:
        agent = Agent(model="m", api_key="k", base_url=server.base_url, tools=[lookup],
                      include_partial_messages=True)
        messages = list(agent.query("go"))
        kinds = {m.type for m in messages}
        assert {"stream_event", "assistant", "user", "result"} <= kinds
        deltas = [m.event for m in messages if m.type == "stream_event"
                  and m.event.get("type") == "content_block_delta"]
        assert deltas and messages[-1].result == "final answer"
        history = agent.get_history()
        assert history[1]["provider_response_id"] and history[1]["model"]
        assert history[2]["content"][0]["content"] == "value of k"


def test_abort_while_server_hangs():
    with MockMessagesServer([MockMessagesServer.hang()]) as server:
        agent = Agent(model="m", api_key="k", base_url=server.base_url)
        controller = AbortController()
        threading.Timer(0.2, controller.abort).start()
        t0 = time.monotonic()
        result = agent.prompt("x", signal=controller.signal)
        assert result.subtype == "error_abort" and time.monotonic() - t0 < 3


def test_request_timeout_while_server_hangs():
    with MockMessagesServer([MockMessagesServer.hang()]) as server:
        agent = Agent(model="m", api_key="k", base_url=server.base_url, request_timeout_ms=200)
        t0 = time.monotonic()
        result = agent.prompt("x")
        assert result.subtype == "error_timeout" and time.monotonic() - t0 < 3


def test_many_agents_share_one_client_across_threads():
    with MockMessagesServer() as server:  # every request: the default text reply
        client = AnthropicClient(api_key="k", base_url=server.base_url)
        errors = []

        def work():
            try:
                for _ in range(5):
                    agent = Agent(model="m", model_client=client)
                    assert agent.prompt("hi").subtype == "success"
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == [] and len(server.requests) == 40
