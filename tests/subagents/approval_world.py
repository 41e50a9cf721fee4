"""A parent, a child whose ``pay`` tool needs approval, and the models of both, importable
by the processes tests/subagents/test_approval_processes.py starts."""

import json
import os

from lattice import Agent, SqliteHistoryStore, Tool


def child_model(request):
    last = request.messages[-1]["content"]
    if isinstance(last, str):
        return {"content": [{"type": "tool_use", "id": "c1", "name": "pay",
                             "input": {"amount": 5}}]}
    return f"child saw: {last[0]['content']}"


def parent_model(request):
    last = request.messages[-1]["content"]
    if isinstance(last, str):
        return {"content": [{"type": "tool_use", "id": "d1", "name": "payer",
                             "input": {"prompt": "pay"}}]}
    return f"parent saw: {last[0]['content']}"


def parent(path, log):
    def pay(input):
        with open(log, "a") as f:
            f.write(json.dumps([os.getpid(), input["amount"]]) + "\n")
        return f"paid {input['amount']}"

    child = Agent(model="c", name="payer", system="Pays.", model_client=child_model,
                  tools=[Tool("pay", "Pay.", {"type": "object"}, pay, requires_approval=True)])
    return Agent(model="p", model_client=parent_model, tools=[child.as_tool()],
                 history_store=SqliteHistoryStore(path, "web-1"))
