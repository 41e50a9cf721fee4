"""Property-style tests: many random conversations, and many random cancellations.

After every query, however it ended: the history is well-formed (every tool_use answered
in the next message), the guard is free, and no reply from a lost race appears later.
"""
import itertools
import random
import threading
import time

import pytest

from lattice import AbortController, Agent, Tool, ToolResult
from lattice.testing import FunctionModelClient, assert_well_formed

KINDS = ("ok", "raise", "end_turn", "unknown", "bad_input")
# How a query of the storm may end: its result's subtype, or closed by the consumer.
OUTCOMES = ("success", "error_max_turns", "error_abort", "interrupted", "error_timeout",
            "closed")


def _tools(rng, sleep=False):
    def handler(args):
        if sleep:
            time.sleep(rng.random() * 0.002)
        kind = args["kind"]
        if kind == "raise":
            raise ValueError("random failure")
        if kind == "end_turn":
            return ToolResult("ended by tool", end_turn=True)
        return f"ok {args['n']}"

    schema = {"type": "object", "properties": {"kind": {"type": "string"},
                                               "n": {"type": "integer"}},
              "required": ["kind", "n"]}
    return [Tool("work", "Work.", schema, handler)]


def _script(rng, ids, sleep_max=0.0, marks=None):
    def fn(request):
        if sleep_max:
            time.sleep(rng.random() * sleep_max)
        n = next(ids)
        text = f"reply-{n}"
        if marks is not None:
            marks.add(text)
        roll = rng.random()
        if roll < 0.3:
            return {"content": [{"type": "text", "text": text}],
                    "stop_reason": rng.choice(["end_turn", "end_turn", "max_tokens"])}
        calls = []
        for j in range(rng.randint(1, 3)):
            kind = rng.choice(KINDS)
            name = "nope" if kind == "unknown" else "work"
            args = {"kind": kind, "n": "x" if kind == "bad_input" else j}
            calls.append({"type": "tool_use", "id": f"toolu_{n}_{j}", "name": name,
                          "input": args})
        stop = "max_tokens" if roll > 0.95 else "tool_use"
        return {"content": [{"type": "text", "text": text}] + calls, "stop_reason": stop}
    return fn


@pytest.mark.parametrize("seed", range(4))
def test_random_conversations_keep_history_well_formed(seed):
    rng = random.Random(seed)
    ids = itertools.count()
    for _ in range(60):
        agent = Agent(model="m", model_client=FunctionModelClient(_script(rng, ids)),
                      tools=_tools(rng), max_turns=rng.randint(1, 6),
                      parallel_tool_calls=rng.random() < 0.3)
        for _ in range(rng.randint(1, 4)):
            use_query = rng.random() < 0.5
            if use_query:
                messages = list(agent.query("go"))
                result = messages[-1]
                assert all(m.type != "result" for m in messages[:-1])
            else:
                result = agent.prompt("go")
            assert result.type == "result"
            assert result.subtype in ("success", "error_max_turns")
            history = agent.get_history()
            assert_well_formed(history)
            if result.subtype == "success" and result.result == "ended by tool":
                assert history[-1]["role"] == "user"


@pytest.mark.slow
def test_random_cancellation_storm():
    """Abort, interrupt, request timeouts and closed generators at random moments: during
    model calls, between turns, inside tools, inside parallel batches."""
    rng = random.Random(1234)
    ids = itertools.count()
    earlier = set(threading.enumerate())  # hung workers other tests abandoned
    yielded_replies = set()
    made_replies = set()
    agents = []
    outcomes = {}
    for i in range(2500):
        if i % 5 == 0:
            agent = Agent(model="m", model_client=FunctionModelClient(
                _script(rng, ids, sleep_max=0.003, marks=made_replies)),
                tools=_tools(rng, sleep=True), max_turns=4,
                parallel_tool_calls=rng.random() < 0.5)
            snapshot = []
            agents.append([agent, snapshot])
        # nothing written after the previous query ended
        assert agent.get_history() == snapshot
        action = rng.choice(["abort", "interrupt", "timeout", "close", "none"])
        controller = AbortController()
        options = {"signal": controller.signal}
        if action == "timeout":
            options["request_timeout_ms"] = rng.randint(1, 3)
        delay = rng.random() * 0.004
        if action in ("abort", "interrupt"):
            fire = controller.abort if action == "abort" else agent.interrupt
            threading.Timer(delay, fire).start()
        messages = []
        closed = False
        gen = agent.query("go", **options)
        for message in gen:
            messages.append(message)
            if message.type == "assistant":
                yielded_replies.add(message.text)
            if action == "close" and rng.random() < 0.3:
                gen.close()
                closed = True
                break
        outcome = "closed" if closed else messages[-1].subtype
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        history = agent.get_history()
        assert_well_formed(history)
        agent.replace_history(history)  # the guard is free
        snapshot = agents[-1][1] = history
        if closed:
            # replies committed before the close are kept without being yielded
            yielded_replies.update(e["content"][0]["text"] for e in history
                                   if e["role"] == "assistant")
        for entry in history:
            if entry["role"] == "assistant":
                assert entry["content"][0]["text"] in yielded_replies
    # let every abandoned worker finish, then check nothing landed late
    deadline = time.monotonic() + 10
    while any(t.name == "lattice-query" and t not in earlier for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for a, last in agents:
        assert a.get_history() == last
    # the storm really exercised every way a query can end here
    assert set(outcomes) == set(OUTCOMES), outcomes
    assert made_replies - yielded_replies, "some replies should have lost the race"


@pytest.mark.parametrize("seed", range(4))
def test_random_conversations_with_approval_pauses_and_resumes(seed):
    """After every query: well-formed, or ending in exactly one marked pending tail."""
    from lattice.messages import pending_tail
    from lattice.testing import history_problems

    rng = random.Random(seed)
    agent = Agent(model="m", model_client=FunctionModelClient(_script(rng, itertools.count())),
                  tools=_tools(rng), max_turns=5,
                  requires_approval=lambda call: rng.random() < 0.3)
    for _ in range(60):
        pending = agent.pending_approvals()
        roll = rng.random()
        if pending and roll < 0.7:
            decisions = {c.id: rng.choice([True, False, "no thanks", ToolResult("fake")])
                         for c in pending}
            result = agent.prompt("and then" if roll < 0.2 else None, approvals=decisions)
        else:
            result = agent.prompt("go")
        history = agent.get_history()
        tail = pending_tail(history)
        if result.subtype == "awaiting_approval":
            assert tail is not None and result.pending_approvals
            assert history_problems(history[:-1]) == []
        else:
            assert tail is None
            assert_well_formed(history)
