"""Usage (lattice/usage.py): sums over a query (SPEC 3), and the token budget
(``max_budget_tokens``, SPEC 15) that ends a query before its next request."""
import json

import pytest
from helpers import (
    add,
    echo_tool,
    function_agent,
    reply,
    run,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    Agent,
    BudgetExceededError,
    Usage,
)
from lattice.testing import (
    ScriptedModelClient,
    assert_well_formed,
)


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


# -- arithmetic ------------------------------------------------------------------------------


def test_usage_arithmetic():
    u = lattice.Usage(1, 2, 3, 4) + lattice.Usage(10, 20, 30, 40)
    assert u.to_dict() == {"input_tokens": 11, "output_tokens": 22,
                           "cache_creation_input_tokens": 33, "cache_read_input_tokens": 44}
    assert lattice.Usage.from_dict({"input_tokens": None, "output_tokens": True}) == lattice.Usage()


# -- null usage fields -----------------------------------------------------------------------


def test_null_usage_fields_count_as_zero():
    agent, _ = scripted([reply("x", usage={"input_tokens": None, "output_tokens": 3,
                                           "cache_read_input_tokens": None})])
    r = agent.prompt("go")
    assert r.usage.to_dict() == {"input_tokens": 0, "output_tokens": 3,
                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def test_usage_summed_and_missing_usage_is_zero():
    u1 = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2}
    u2 = {"input_tokens": 20, "output_tokens": 7, "cache_creation_input_tokens": 3}
    agent, _ = scripted([reply(tool_use("add", {"a": 1, "b": 1}), usage=u1), reply("ok", usage=u2)],
                    tools=[add])
    result = agent.prompt("x")
    assert result.usage.to_dict() == {"input_tokens": 30, "output_tokens": 12,
                                      "cache_creation_input_tokens": 3,
                                      "cache_read_input_tokens": 2}
    agent2, _ = scripted(["no usage"])
    assert agent2.prompt("x").usage == lattice.Usage()


def test_max_budget_tokens_ends_before_the_next_request():
    usage = {"input_tokens": 60, "output_tokens": 10}
    client = ScriptedModelClient([reply(tool_use("echo", id=str(i)), usage=usage)
                                  for i in range(5)])
    agent = Agent(model="m", model_client=client, tools=[echo_tool()], max_budget_tokens=140)
    result = agent.prompt("go")
    assert result.subtype == "error_max_budget" and result.is_error
    assert isinstance(result.error, BudgetExceededError) and len(client.requests) == 2
    assert_well_formed(agent.get_history())
    again = agent.prompt("more", max_budget_tokens=70)  # each query counts from zero
    assert again.subtype == "error_max_budget" and len(client.requests) == 3
    with pytest.raises(ValueError, match="max_budget_tokens"):
        agent.prompt("x", max_budget_tokens=0)


def test_a_budget_crossed_by_compaction_ends_before_the_next_request():
    def model(request):
        if request.system is None:  # the summary
            return reply("summary", usage={"input_tokens": 400, "output_tokens": 50})
        return reply(tool_use("echo", id=str(len(request.messages))),
                     usage={"input_tokens": 200, "output_tokens": 10})

    agent = Agent(model="m", model_client=model, tools=[echo_tool()], system="s",
                  auto_compact={"threshold_tokens": 100, "keep_recent_messages": 2},
                  max_budget_tokens=600)
    result = agent.prompt("go")
    assert result.subtype == "error_max_budget"
    assert result.usage.input_tokens == 200 + 400 and result.num_turns == 1
