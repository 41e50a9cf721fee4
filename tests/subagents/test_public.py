"""SPEC part four's new names for subagents, as an outside tester sees them."""

import inspect

from lattice import (
    Agent,
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    ToolCall,
    Usage,
    UserMessage,
)
from lattice.cancellation import AbortSignal


def test_the_new_names_exist():
    params = inspect.signature(Agent.as_tool).parameters
    assert list(params)[1:] == ["name", "description", "input_schema", "output", "isolated",
                                "idempotent"]
    assert params["output"].default == "result" and params["isolated"].default is True
    assert params["idempotent"].default is None
    assert inspect.signature(Agent).parameters["name"].default is None
    assert inspect.signature(Agent.query).parameters["include_subagent_messages"].default \
        is False
    assert Usage().by_model == {}
    call = ToolCall("t1", "x", {}, None, AbortSignal(), None)
    assert call.path == ["t1"]
    for message in (AssistantMessage({"role": "assistant", "content": []}),
                    UserMessage({"role": "user", "content": "x"}), SystemMessage("compaction"),
                    StreamEvent({}), ResultMessage("success")):
        assert message.parent_tool_use_id is None


def test_by_model_adds_up_and_takes_no_part_in_equality():
    a = Usage(1, 2).of_model("m1")
    b = Usage(3, 4).of_model("m2")
    c = Usage(5, 6).of_model("m1")
    total = a + b + c
    assert total == Usage(9, 12)
    assert total.by_model == {"m1": Usage(6, 8), "m2": Usage(3, 4)}
    assert total.to_dict() == Usage(9, 12).to_dict()
    assert Usage.from_dict(total.to_dict(by_model=True)).by_model == total.by_model
