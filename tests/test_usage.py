"""Usage (lattice/usage.py): sums over a query (SPEC 3)."""
import json

from helpers import (
    function_agent,
    reply,
    run,
    scripted,
    tool_use,
)

import lattice
from lattice import (
    Usage,
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
