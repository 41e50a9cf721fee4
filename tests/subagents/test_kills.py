"""SPEC 22's durable children under ``kill -9``: real processes killed at chosen points and at
random moments of a parent run that delegates to subagents, on SQLite and PostgreSQL.

As in tests/durable/test_durable_crash.py (both use tests/kill_runs.py), each attempt is a
process forked from a "zygote" that has imported lattice, running
``parent.prompt(prompt, run_id=...)``, and a run is attempted again with the same run id
until one attempt returns. The parent's first reply asks two isolated
children (``researcher``) and its own non-idempotent ``charge`` at once; each child makes one
tool turn (a non-idempotent ``charge`` and an idempotent ``lookup``), then answers; the
parent then answers. Children keep their runs (``f"{run}/{call id}"``) in sessions derived
from the parent's. Every model request, side effect, stored reply and recorded end is
logged with one ``os.write`` per line. Then, for every run: the parent run ended exactly
once, and so did each child run; no reply that was stored (a finished turn, the parent's
or a child's) was asked for again; each ``charge`` ran at most once per tool_use id; every
session's history is well-formed with no message twice; the result and its usage count
every stored reply once.
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

CHILDREN = ("a", "b")
USAGE = {"input_tokens": 10, "output_tokens": 1}
REPLIES = 2 + 2 * len(CHILDREN)  # an uninterrupted run's model replies, children's included
KINDS = ("sqlite", "postgres-psycopg")


# -- the attempt (in a forked process) ----------------------------------------------------------

def run_attempt(kind, where, session, run_id, crash, log_path):
    from lattice import Agent

    log, die_at = event_log(log_path, run_id), crash_at(crash)
    writes = [0]

    def turn(request, who):
        """``who`` is "P" (the parent) or the child's letter; the step is the number of
        replies since this run's prompt (the parent's session holds the earlier runs)."""
        messages = request.messages
        start = max(i for i, m in enumerate(messages) if isinstance(m["content"], str)
                    and m["content"].startswith(("P ", f"{run_id}:")))
        step = sum(1 for m in messages[start:] if m["role"] == "assistant")
        log("request", who, step)
        die_at(f"request_{who}", step)
        time.sleep(0.002)
        return step

    def parent_model(request):
        step = turn(request, "P")
        if step == 0:
            return {"content": [{"type": "text", "text": "P step 0"}] + [
                {"type": "tool_use", "id": f"d-{run_id}-{c}", "name": "researcher",
                 "input": {"prompt": f"{run_id}:{c}"}} for c in CHILDREN] + [
                {"type": "tool_use", "id": f"pc-{run_id}", "name": "charge",
                 "input": {"amount": 9}}], "usage": USAGE}
        seen = sorted(b["content"] for b in request.messages[-1]["content"]
                      if not b.get("is_error") and b["content"].startswith("C:"))
        return {"content": [{"type": "text", "text": f"A:{run_id}:{len(seen)}"}],
                "usage": USAGE}

    def child_model(request):
        tag = request.messages[0]["content"]  # "<run>:<letter>"
        who = tag.rsplit(":", 1)[1]
        step = turn(request, who)
        if step == 0:
            return {"content": [
                {"type": "text", "text": f"{who} step 0"},
                {"type": "tool_use", "id": f"c-{tag}", "name": "charge", "input": {"amount": 1}},
                {"type": "tool_use", "id": f"l-{tag}", "name": "lookup", "input": {"key": who}}],
                "usage": USAGE, "model": "small"}
        return {"content": [{"type": "text", "text": f"C:{tag}"}], "usage": USAGE,
                "model": "small"}

    def effect(name, context):
        die_at(f"{name}_before")
        log("effect", name, context.tool_use_id, context.attempt, context.run_id)
        die_at(f"{name}_after")

    charge, lookup = effect_tools(effect)

    def watched(store):
        """Each write counted (``write:<n>`` crashes right after the n-th), each stored
        reply and each recorded end logged; stores derived from it are watched too."""
        writers = ("append", "save_run", "replace", "append_and_save_run", "save_calls",
                   "append_and_save_calls")
        for name in (*writers, "with_session"):
            store.__dict__.pop(name, None)  # (PostgreSQL's with_session copies the instance)
        for name in writers:
            real = getattr(store, name, None)
            if real is None:
                continue

            def counted(*args, _real=real, _name=name, _session=store.session_id):
                _real(*args)
                if _name in ("append", "append_and_save_run", "append_and_save_calls") and \
                        args[0].get("role") == "assistant":
                    log("stored", _session, args[0]["content"][0]["text"])
                if _name in ("save_run", "append_and_save_run") and \
                        args[-1].get("state") == "ended":
                    log("ended", args[-1]["run_id"])
                writes[0] += 1
                die_at("write", writes[0])

            setattr(store, name, counted)
        derive = store.with_session
        store.with_session = lambda session: watched(derive(session))
        return store

    store = watched(make_store(kind, where, session, fail_on_error=True))
    child = Agent(model="small", name="researcher", system="Researches one question.",
                  model_client=child_model, tools=[charge, lookup], session_lock_wait_s=30)
    parent = Agent(model="big", model_client=parent_model, history_store=store,
                   tools=[child.as_tool(), charge], session_lock_wait_s=30)
    result = parent.prompt(f"P {run_id}", run_id=run_id)
    log("result", result.subtype, result.replayed, result.num_turns, result.result,
        result.usage.input_tokens, result.usage.by_model.get("small", {}) and
        result.usage.by_model["small"].input_tokens)


def check_runs(kind, where, session, log_path, run_ids):
    """The guarantees, for every run of the session and every child run."""
    from lattice.testing import history_problems

    events = read_events(log_path)
    errors = [e for e in events if e[1] == "error"]
    assert not errors, errors[:3]
    store = make_store(kind, where, session)
    records = {r["run_id"]: r for r in store.list_runs(all_sessions=True)}
    sessions = {r["session_id"] for r in records.values()}
    for name in sessions:
        history = store.with_session(name).load()
        assert history_problems(history) == [], (name, history_problems(history)[:5], [
            (m["role"], str(m["content"])[:150], sorted(m)) for m in history[-6:]])
        seen = [json.dumps(m, sort_keys=True) for m in history]
        assert len(seen) == len(set(seen)), f"a message is stored twice in {name}"
    for run_id in run_ids:
        mine = [e for e in events if e[0] == run_id]
        children = [f"{run_id}/d-{run_id}-{c}" for c in CHILDREN]
        for rid in [run_id] + children:  # each run ended exactly once: its record says
            # ended, and one attempt at most recorded the end (an attempt killed between
            # that write and its log line leaves no line: the next one replays the run)
            assert [e[2] for e in mine if e[1] == "ended"].count(rid) <= 1, (rid, mine[-4:])
            assert records[rid]["state"] == "ended"
        for rid in children:
            assert records[rid]["session_id"] == f"{session}/{rid.split('/', 1)[1]}"
        ran = [e for e in mine if e[1] == "result" and e[3] is False]
        assert len(ran) <= 1 and [e for e in mine if e[1] == "result"], (run_id, mine[-4:])
        for result in (e for e in mine if e[1] == "result"):
            assert result[2] == "success", result
            assert result[5].startswith(f"A:{run_id}:"), result
            assert result[4] == 2, result  # the parent's own requests
            assert result[6] == 10 * REPLIES and result[7] == 10 * 2 * len(CHILDREN), result
        # No finished turn spent again: once a reply is stored, its step is never asked for.
        stored = set()
        for e in mine:
            if e[1] == "stored":
                text = e[3]
                if text.startswith(("A:", "C:")):  # a final answer: the parent's or a child's
                    stored.add(("P" if text[0] == "A" else text.rsplit(":", 1)[1], "final"))
                else:
                    stored.add(tuple(text.split(" step ")))
            elif e[1] == "request":
                step = str(e[3]) if e[3] == 0 else "final"
                assert (e[2], step) not in stored, (run_id, e, "asked again after stored")
        effects = {}
        for e in mine:
            if e[1] == "effect":
                effects.setdefault(e[3], []).append(e[4])
        charges = [f"c-{run_id}:{c}" for c in CHILDREN] + [f"pc-{run_id}"]
        for charge in charges:
            assert len(effects.get(charge, [])) <= 1, (charge, effects.get(charge))
        for c in CHILDREN:
            attempts = effects.get(f"l-{run_id}:{c}", [])
            assert attempts == sorted(set(attempts)), attempts  # each a new attempt
    return events


CHOSEN = ["request_P:0", "request_a:0", "request_b:1", "request_P:1", "charge_before",
          "charge_after", "lookup_before", "lookup_after", "write:2", "write:3", "write:5",
          "write:7", "write:9", "write:11", "write:13", "write:16", "write:19"]


@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_at_chosen_points_of_a_parent_with_children(kind, tmp_path, request):
    where = where_for(kind, tmp_path, request)
    session = f"chosen-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "events.log"
    attempts, run_ids = chosen_crashes(__file__, kind, where, session, log_path, CHOSEN)
    try:
        assert not attempts.once(run_ids[0])  # a redelivered job: replayed
    finally:
        attempts.close()
    events = check_runs(kind, where, session, log_path, run_ids)
    assert [e[3] for e in events if e[0] == run_ids[0] and e[1] == "result"][-1] is True


def test_kill_9_at_random_points_of_a_parent_with_children_100_times_per_store(
        tmp_path, request):
    """The stores' loops run at once, each driving its own processes."""
    out = random_crashes_per_store(__file__, KINDS, tmp_path, request, max_delay=0.15)
    for kind, (where, log_path, session, _, run_ids) in out.items():
        check_runs(kind, where, session, log_path, run_ids)


if __name__ == "__main__" and sys.argv[1:2] == ["zygote"]:
    zygote(run_attempt, *sys.argv[2:6])
