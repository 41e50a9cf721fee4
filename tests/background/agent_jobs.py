"""What every background job in these tests runs: one agent run whose ``run_id`` is the job's id.

The model is a deterministic function (no network): each run makes ``TURNS`` tool turns, each
calling ``pay`` (a side effect that must happen at most once per call) and ``lookup``
(idempotent: may happen again after a crash), then answers. Every side effect, model request,
job start and run end is one line appended to ``JOB_LOG`` (O_APPEND: lines from many
processes never interleave), which the tests read to check the run-exactly-once rules.
"""

import json
import os
import time

from lattice import Agent, ConcurrentQueryError, SqliteHistoryStore, tool
from lattice.testing import FunctionModelClient

TURNS = 4


def log(event, **fields):
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n"
    fd = os.open(os.environ["JOB_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _pause(name):
    time.sleep(float(os.environ.get(name, "0.1")))  # slow work: a window for the kills


@tool
def pay(amount: int, ref: str) -> str:
    """Pay an amount (not idempotent)."""
    _pause("JOB_TOOL_DELAY")
    log("effect", tool="pay", ref=ref)
    _pause("JOB_TOOL_DELAY")
    return f"paid {amount}"


@tool(idempotent=True)
def lookup(ref: str) -> str:
    """Look a reference up (idempotent)."""
    log("effect", tool="lookup", ref=ref)
    return f"found {ref}"


def model(request):
    label = request.messages[0]["content"]
    done = sum(1 for m in request.messages if m["role"] == "user" and isinstance(m["content"], list))
    log("request", run=label, turn=done)
    _pause("JOB_MODEL_DELAY")
    if done >= TURNS:
        return f"{label}: all {TURNS} payments made"
    ref = f"{label}-t{done}"
    return {"content": [
        {"type": "tool_use", "id": f"{ref}-pay", "name": "pay", "input": {"amount": done, "ref": ref}},
        {"type": "tool_use", "id": f"{ref}-look", "name": "lookup", "input": {"ref": ref}},
    ], "stop_reason": "tool_use"}


def run(prompt, run_id):
    """The job's body: the run ``run_id`` of ``prompt``, continued if a crash left it running."""
    log("start", run=prompt, run_id=run_id)
    store = SqliteHistoryStore(os.environ["JOB_DB"], session_id=prompt)
    agent = Agent(model="test-model", model_client=FunctionModelClient(model),
                  tools=[pay, lookup], history_store=store, session_lock_wait_s=2.0)
    result = agent.prompt(prompt, run_id=run_id)
    log("end", run=prompt, run_id=run_id, subtype=result.subtype, replayed=result.replayed)
    return result.subtype


__all__ = ["run", "ConcurrentQueryError", "TURNS"]


def run_until_free(prompt, run_id, tries=20):
    """``run``, waiting while another process still holds the run (its lease runs out within
    a few seconds of a crash)."""
    for _ in range(tries - 1):
        try:
            return run(prompt, run_id)
        except ConcurrentQueryError:
            time.sleep(0.5)  # the holder is alive or its lease has not run out yet
    return run(prompt, run_id)


def rq_job(prompt):
    """The RQ job: the run's id is the job's id."""
    from rq import get_current_job

    return run_until_free(prompt, get_current_job().id)


def unfinished_runs(db_path):
    """The startup hook's question (docs/background-runs.md): which runs did a crash or a
    deploy leave ``running`` with nobody working on them? -> ``[(prompt, run_id)]``."""
    found = []
    for record in SqliteHistoryStore(db_path, session_id="-").list_runs(
            state="running", all_sessions=True):
        store = SqliteHistoryStore(db_path, session_id=record["session_id"])
        try:
            with store.lock(wait_s=0):
                pass
        except ConcurrentQueryError:
            continue  # a live worker holds it
        found.append((record["prompt"], record["run_id"]))
    return found
