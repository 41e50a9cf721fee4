"""SPEC 17's crash guarantees, with real processes killed by SIGKILL, on JSONL, SQLite and
PostgreSQL.

Each attempt at a run is a new process (forked from a "zygote" that has imported lattice,
so an attempt costs milliseconds, not an interpreter start) running
``agent.prompt(prompt, run_id=...)`` with a deterministic model (``TURNS`` tool turns, each
calling a non-idempotent ``charge`` and an idempotent ``lookup``, then an answer). Every
side effect, model request and result is logged with one ``os.write`` per line. A run is
attempted again, in a new process with the same run id, until one attempt returns.

Crashes come at chosen points (inside a tool before and after its side effect, during a
model request, right after the n-th store write) and at random moments (the parent kills
the process after a seeded random delay). Then, for every run: it ended exactly once (one
result that is not a replay, and a later call replays it without a model request); the
stored history is well-formed with no message twice; ``charge`` ran at most once per
tool_use_id and ``lookup`` at least once; model requests are at most an uninterrupted run's
plus one per crash.
"""

import json
import os
import sys
import time
import uuid

import pytest
from background_checks import read_events
from kill_runs import (
    chosen_crashes,
    crash_at,
    effect_tools,
    event_log,
    random_crashes_per_store,
    where_for,
    zygote,
)
from store_kinds import make_store

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

TURNS = 3
REQUESTS = TURNS + 1  # an uninterrupted run's model requests


# -- the attempt (in a forked process) ----------------------------------------------------------

def run_attempt(kind, where, session, run_id, crash, log_path):
    """One process's attempt at ``run_id``; ``crash`` is where it kills itself, if anywhere
    (``none``, ``request:<step>``, ``charge_before:<step>``, ``write:<n>``, ...)."""
    from lattice import Agent

    log, die_at = event_log(log_path, run_id), crash_at(crash)
    writes = [0]

    def model(request):
        messages = request.messages
        start = max(i for i, m in enumerate(messages)
                    if isinstance(m["content"], str) and m["content"].startswith("P "))
        tag = messages[start]["content"][2:]
        step = sum(1 for m in messages[start:] if m["role"] == "assistant")
        log("request", step)
        die_at("request", step)
        time.sleep(0.003)
        if step < TURNS:
            return {"content": [
                {"type": "text", "text": f"step {step} of {tag}"},
                {"type": "tool_use", "id": f"c-{tag}-{step}", "name": "charge",
                 "input": {"amount": step + 1}},
                {"type": "tool_use", "id": f"l-{tag}-{step}", "name": "lookup",
                 "input": {"key": f"k{step}"}}],
                "usage": {"input_tokens": 10, "output_tokens": 1}}
        return {"content": [{"type": "text", "text": f"A:{tag}"}],
                "usage": {"input_tokens": 10, "output_tokens": 1}}

    def effect(name, context):
        die_at(f"{name}_before", int(context.tool_use_id.rsplit("-", 1)[1]))
        log("effect", name, context.tool_use_id, context.attempt, context.run_id)
        die_at(f"{name}_after", int(context.tool_use_id.rsplit("-", 1)[1]))
        time.sleep(0.001)

    charge, lookup = effect_tools(effect)

    store = make_store(kind, where, session, fail_on_error=True)
    for name in ("append", "save_run", "replace", "append_and_save_run", "save_calls",
                 "append_and_save_calls"):
        real = getattr(store, name, None)
        if real is None:  # (the stores that do not write journal entries by themselves)
            continue

        def counted(*args, _real=real, _name=name):
            _real(*args)
            if _name == "save_run" and args[0].get("state") == "ended":
                log("ended", args[0]["run_id"])
            writes[0] += 1
            die_at("write", writes[0])

        setattr(store, name, counted)
    agent = Agent(model="m", model_client=model, tools=[charge, lookup], history_store=store,
                  session_lock_wait_s=30)
    result = agent.prompt(f"P {run_id}", run_id=run_id)
    log("result", result.subtype, result.replayed, result.num_turns, result.result,
        result.usage.input_tokens)


def check_runs(kind, where, session, log_path, crashes, run_ids):
    """SPEC 17's crash guarantees for every run of the session."""
    from lattice.testing import history_problems

    events = read_events(log_path)
    errors = [e for e in events if e[1] == "error"]
    assert not errors, errors[:3]
    store = make_store(kind, where, session)
    history = store.load()
    assert history_problems(history) == [], history_problems(history)[:5]
    seen = [json.dumps(m, sort_keys=True) for m in history]
    assert len(seen) == len(set(seen)), "a message is stored twice"
    ids = {b["tool_use_id"]: b for m in history if isinstance(m["content"], list)
           for b in m["content"] if b.get("type") == "tool_result"}
    for run_id in run_ids:
        mine = [e for e in events if e[0] == run_id]
        # Ended once: one attempt recorded the end (an attempt killed right after it did
        # not get to report its result: the next one replays it), later calls replay it.
        ended = [e for e in mine if e[1] == "ended"]
        ran = [e for e in mine if e[1] == "result" and e[3] is False]
        replays = [e for e in mine if e[1] == "result" and e[3] is True]
        assert len(ended) <= 1 and len(ran) <= 1 and (ran or replays), (run_id, mine[-3:])
        for result in ran + replays:
            assert result[2] == "success" and result[5] == f"A:{run_id}", result
            # num_turns and usage cover the whole run: every stored reply, once
            assert result[4] == REQUESTS and result[6] == 10 * REQUESTS, result
        record = store.load_run(run_id)
        assert record is not None and record["state"] == "ended", record
        requests = sum(1 for e in mine if e[1] == "request")
        assert requests <= REQUESTS + crashes.get(run_id, 0), (run_id, requests, crashes)
        effects = {}
        for e in mine:
            if e[1] == "effect":
                assert e[5] == run_id
                effects.setdefault(e[3], []).append(e[4])
        for step in range(TURNS):
            charge, lookup = f"c-{run_id}-{step}", f"l-{run_id}-{step}"
            assert len(effects.get(charge, [])) <= 1, (charge, effects.get(charge))
            assert charge in ids and lookup in ids, (run_id, step)
            if not ids[lookup].get("is_error"):
                assert len(effects.get(lookup, [])) >= 1, lookup
            attempts = effects.get(lookup, [])
            assert attempts == sorted(set(attempts)), (lookup, attempts)  # each a new attempt
    return events


# -- the tests -----------------------------------------------------------------------------------

CHOSEN = ["charge_before:0", "charge_after:0", "lookup_before:1", "lookup_after:1",
          "request:0", "request:2", "request:3", "write:1", "write:2", "write:3", "write:4",
          "write:5", "write:7", "write:9"]
KINDS = ("jsonl", "sqlite", "postgres-psycopg")


@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_at_chosen_points_then_resume_with_the_same_run_id(kind, tmp_path, request):
    where = where_for(kind, tmp_path, request)
    session = f"chosen-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "events.log"
    attempts, run_ids = chosen_crashes(__file__, kind, where, session, log_path, CHOSEN)
    try:
        for run_id in run_ids[:3]:  # a redelivered job: replayed, no request
            assert not attempts.once(run_id)
    finally:
        attempts.close()
    events = check_runs(kind, where, session, log_path, attempts.crashes, run_ids)
    replays = [e for e in events if e[1] == "result" and e[3] is True]
    assert [e[0] for e in replays] == run_ids[:3]
    assert len([e for e in events if e[1] == "ended"]) == len(run_ids)
    unknown = {b["tool_use_id"] for m in make_store(kind, where, session).load()
               if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "tool_result" and "unknown" in str(b.get("content"))}
    # charge crashed before and after its effect: both journaled as started, neither run
    # again; lookup (idempotent) crashed the same way and was run again instead
    assert {"c-r0-0", "c-r1-0"} <= unknown and not any(i.startswith("l-") for i in unknown)


def test_kill_9_at_random_points_at_least_100_times_per_store(tmp_path, request):
    """The three stores' loops run at once, each driving its own processes."""
    out = random_crashes_per_store(__file__, KINDS, tmp_path, request, max_delay=0.12)
    for kind, (where, log_path, session, crashes, run_ids) in out.items():
        check_runs(kind, where, session, log_path, crashes, run_ids)


if __name__ == "__main__" and sys.argv[1:2] == ["zygote"]:
    zygote(run_attempt, *sys.argv[2:6])
