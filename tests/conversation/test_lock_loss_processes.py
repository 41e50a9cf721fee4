"""The three ways issue 24 saw one conversation written by two processes, with real Agents in
real processes (SPEC 17, 18):

- a SQLite holder stopped (SIGSTOP) past its lease while another process runs a query;
- a PostgreSQL holder whose lock connection is terminated (``pg_terminate_backend``) while
  another process runs a query;
- an approved payment whose process died while it ran, approved again.

Nothing the stale holder writes after the takeover reaches the store, the stale query ends
with ``LockLostError``, every stored history is well-formed, and the payment runs once.
"""

import json
import os
import signal
import uuid

import pytest
from store_kinds import child, make_store

from lattice.testing import history_problems

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

HOLDER = """
    import sys, time
    import lattice.stores.sqlite_lease as lease
    from lattice import Agent, LockLostError, tool
    from lattice.testing import FunctionModelClient
    from store_kinds import make_store

    lease.TTL_S, lease.RENEW_S = 1.0, 0.1
    kind, where, session = sys.argv[1:4]

    @tool
    def work(step: int) -> str:
        '''Work on a step.'''
        print("in tool", step, flush=True)
        time.sleep(0.5)  # the parent stops or cuts us off here
        return f"step {step} done"

    def model(request):
        done = sum(1 for m in request.messages if m["role"] == "assistant")
        if done < 3:
            return {"content": [{"type": "tool_use", "id": f"A{done}", "name": "work",
                                 "input": {"step": done}}]}
        return "A finished"

    agent = Agent(model="m", model_client=FunctionModelClient(model), tools=[work],
                  history_store=make_store(kind, where, session, fail_on_error=True))
    try:
        agent.prompt("A: three steps")
        print("finished", flush=True)
    except LockLostError as exc:
        print("lost", flush=True)
"""


def takeover(kind, where, session):
    """What the other process does once it has the session: a query of its own."""
    from lattice import Agent
    from lattice.testing import ScriptedModelClient

    store = make_store(kind, where, session, fail_on_error=True)
    agent = Agent(model="m", model_client=ScriptedModelClient(["B answered"]),
                  history_store=store, session_lock_wait_s=30)
    assert agent.prompt("B: a question").result == "B answered"
    return store.load()


def check_after(kind, where, session, at_takeover):
    stored = make_store(kind, where, session).load()
    assert stored == at_takeover  # nothing the stale holder wrote after the takeover
    assert history_problems(stored) == []
    return stored


def stale_holder_loses(kind, where, session, before_takeover=lambda: None):
    """A holder stopped (SIGSTOP: a frozen VM, a long GC) in its first tool while another
    process takes the session over (after ``before_takeover``), then let go on: it must end
    with "lost" and have written nothing after the takeover; returns the history."""
    proc = child(HOLDER, kind, where, session)
    try:
        assert proc.stdout.readline().strip() == "in tool 0"
        os.kill(proc.pid, signal.SIGSTOP)
        before_takeover()
        at_takeover = takeover(kind, where, session)
        os.kill(proc.pid, signal.SIGCONT)
        lines = [line.strip() for line in proc.stdout]
        assert proc.wait(60) == 0, lines
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert lines[-1] == "lost", lines
    return check_after(kind, where, session, at_takeover)


def test_a_sqlite_holder_stopped_past_its_lease_ends_with_lock_lost(tmp_path):
    # the takeover waits out the stopped holder's 1 s lease
    stored = stale_holder_loses("sqlite", str(tmp_path), "s")
    assert stored[-1]["content"][0]["text"] == "B answered"


def test_a_postgres_holder_whose_lock_connection_died_ends_with_lock_lost(postgres_server):
    pytest.importorskip("psycopg")
    from stores.test_fencing import kill_lock_connection

    kind, where, session = "postgres-psycopg", postgres_server.conninfo, f"p-{uuid.uuid4().hex}"
    # stopped first, so the takeover surely comes before the holder notices its lock is gone
    stale_holder_loses(kind, where, session, lambda: kill_lock_connection(
        where, make_store(kind, where, session)))


APPROVER = """
    import json, os, signal, sys
    from lattice import Agent, Tool
    from lattice.testing import FunctionModelClient
    from store_kinds import make_store

    kind, where, session, paid_log, step = sys.argv[1:6]

    def pay(args):
        with open(paid_log, "a") as f:
            f.write("paid\\n")
        if step == "approve":
            os.kill(os.getpid(), signal.SIGKILL)  # dies after paying, before the result
        return "paid"

    def model(request):
        last = request.messages[-1]
        if isinstance(last["content"], str) and last["content"] == "pay the bill":
            return {"content": [{"type": "tool_use", "id": "p1", "name": "pay",
                                 "input": {}}]}
        return "ok"

    agent = Agent(model="m", model_client=FunctionModelClient(model),
                  tools=[Tool("pay", "Pay.", {"type": "object"}, pay, requires_approval=True)],
                  history_store=make_store(kind, where, session, fail_on_error=True),
                  session_lock_wait_s=30)  # a killed SQLite holder's lease: up to 5 s
    if step == "ask":
        print(agent.prompt("pay the bill").subtype)
    elif step == "approve":
        agent.prompt(approvals={"p1": True})
    else:
        print(json.dumps([c.id for c in agent.pending_approvals()]))
        try:
            agent.prompt(approvals={"p1": True})
            print("approved again")
        except ValueError:
            print("refused")
        print(agent.prompt("what happened?").subtype)
"""


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_an_approved_payment_whose_process_died_is_not_paid_twice(kind, tmp_path):
    where, session, paid = str(tmp_path), "s", str(tmp_path / "paid.log")

    def step(name):
        proc = child(APPROVER, kind, where, session, paid, name)
        out = [line.strip() for line in proc.stdout]
        proc.stdout.close()
        return proc.wait(60), out

    assert step("ask") == (0, ["awaiting_approval"])
    assert step("approve")[0] == -signal.SIGKILL
    code, out = step("after")
    assert code == 0 and out == ["[]", "refused", "success"], out
    with open(paid) as f:
        assert f.read().count("paid") == 1
    stored = make_store(kind, where, session).load()
    assert history_problems(stored) == []
    answer = [b for m in stored if isinstance(m["content"], list) for b in m["content"]
              if b.get("type") == "tool_result"]
    assert len(answer) == 1 and "unknown" in json.dumps(answer[0])
