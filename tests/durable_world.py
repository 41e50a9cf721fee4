"""What the durable-run tests share (tests/durable/): tools that count their side effects,
a model that counts its requests, and a staged run record."""

from lattice import Agent, ToolContext, tool
from lattice.testing import FunctionModelClient
from lattice.tools.calls import NOT_RUN

UNCERTAIN = NOT_RUN["uncertain"]


def use(id, name="charge", **input):
    return {"type": "tool_use", "id": id, "name": name, "input": input or {"amount": 1}}


def reply(*blocks, usage=None):
    return {"role": "assistant", "content": list(blocks), "stop_reason": "tool_use",
            "usage": usage or {"input_tokens": 10, "output_tokens": 2}}


class World:
    """Tools that count their side effects, a model that counts its requests."""

    def __init__(self, answers=None):
        self.effects = []
        self.requests = []
        self.answers = list(answers or [])

        @tool
        def charge(amount: int, context: ToolContext) -> str:
            """Charge (not safe to repeat)."""
            self.effects.append(("charge", context.tool_use_id, context.run_id, context.attempt))
            return f"charged {amount}"

        @tool(idempotent=True)
        def lookup(key: str, context: ToolContext) -> str:
            """Look up (safe to repeat)."""
            self.effects.append(("lookup", context.tool_use_id, context.run_id, context.attempt))
            return f"value {key}"

        self.tools = [charge, lookup]

    def model(self, request):
        self.requests.append(request)
        if self.answers:
            return self.answers.pop(0)
        return {"content": [{"type": "text", "text": "done"}],
                "usage": {"input_tokens": 10, "output_tokens": 3}}

    def agent(self, store, **options):
        return Agent(model="m", model_client=FunctionModelClient(self.model), tools=self.tools,
                     history_store=store, **options)


def record(run_id="r", prompt="go", index=0, **fields):
    return {"run_id": run_id, "state": "running", "prompt": prompt, "index": index,
            "started_at": 1.0, "started_calls": {}, **fields}
