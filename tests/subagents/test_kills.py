"""SPEC 22's durable children under ``kill -9``: real processes killed at chosen points and at
random moments of a parent run that delegates to subagents, on SQLite and PostgreSQL.

As in tests/test_durable_crash.py, each attempt is a process forked from a "zygote" that has
imported lattice, running ``parent.prompt(prompt, run_id=...)``, and a run is attempted again
with the same run id until one attempt returns. The parent's first reply asks two isolated
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
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from store_kinds import ROOT, TESTS, make_store

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

CHILDREN = ("a", "b")
USAGE = {"input_tokens": 10, "output_tokens": 1}
REPLIES = 2 + 2 * len(CHILDREN)  # an uninterrupted run's model replies, children's included
RANDOM_CRASHES = 100
KINDS = ("sqlite", "postgres-psycopg")


# -- the attempt (in a forked process) ----------------------------------------------------------

def run_attempt(kind, where, session, run_id, crash, log_path):
    from lattice import Agent, ToolContext, tool

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(*event):
        os.write(fd, (json.dumps([run_id, *event]) + "\n").encode())

    point, _, at = crash.partition(":")
    writes = [0]

    def die_at(name, n=None):
        if point == name and (n is None or at == str(n)):
            os.kill(os.getpid(), signal.SIGKILL)

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

    @tool
    def charge(amount: int, context: ToolContext) -> str:
        """Charge a card (not safe to repeat)."""
        effect("charge", context)
        return f"charged {amount}"

    @tool(idempotent=True)
    def lookup(key: str, context: ToolContext) -> str:
        """Look something up (safe to repeat)."""
        effect("lookup", context)
        return f"value of {key}"

    def watched(store):
        """Each write counted (``write:<n>`` crashes right after the n-th), each stored
        reply and each recorded end logged; stores derived from it are watched too."""
        for name in ("append", "save_run", "replace", "append_and_save_run", "with_session"):
            store.__dict__.pop(name, None)  # (PostgreSQL's with_session copies the instance)
        for name in ("append", "save_run", "replace", "append_and_save_run"):
            real = getattr(store, name, None)
            if real is None:
                continue

            def counted(*args, _real=real, _name=name, _session=store.session_id):
                _real(*args)
                if _name in ("append", "append_and_save_run") and \
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


def zygote(kind, where, session, log_path):
    import lattice  # noqa: F401 - imported once here, so attempts start fast
    import lattice.stores.sqlite_lease as lease

    lease.TTL_S, lease.RENEW_S = 0.15, 0.03  # a killed attempt's lease: 0.15 s, not 5 s
    if kind.startswith("postgres-"):
        __import__(kind.split("-", 1)[1])
    print("ready", flush=True)
    for line in sys.stdin:
        run_id, crash = line.split()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_attempt(kind, where, session, run_id, crash, log_path)
            except BaseException as exc:  # reported, so the parent fails with the cause
                with open(log_path, "a") as f:
                    f.write(json.dumps([run_id, "error", f"{type(exc).__name__}: {exc}"]) + "\n")
                code = 1
            os._exit(code)
        print(f"pid {pid}", flush=True)
        assert sys.stdin.readline().strip() == "reap"
        _, status = os.waitpid(pid, 0)
        print(f"exit {pid} {status}", flush=True)


# -- the parent --------------------------------------------------------------------------------

class Attempts:
    """A zygote for one store, and the crashes of the runs attempted through it."""

    def __init__(self, kind, where, session, log_path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT, TESTS, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "zygote", kind, where, session,
             str(log_path)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.crashes = {}

    def once(self, run_id, crash="none", kill_after=None):
        self.proc.stdin.write(f"{run_id} {crash}\n")
        self.proc.stdin.flush()
        pid = int(self.proc.stdout.readline().split()[1])
        if kill_after is not None:
            time.sleep(kill_after)
            os.kill(pid, signal.SIGKILL)  # not reaped yet: it is ours, alive or a zombie
        self.proc.stdin.write("reap\n")
        self.proc.stdin.flush()
        _, _, status = self.proc.stdout.readline().split()
        status = int(status)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert killed or os.WEXITSTATUS(status) == 0, (run_id, crash, status)
        if killed:
            self.crashes[run_id] = self.crashes.get(run_id, 0) + 1
        return killed

    def until_done(self, run_id, crash="none", kill_after=None, limit=40):
        for n in range(limit):
            delay = kill_after(n) if callable(kill_after) else (kill_after if n == 0 else None)
            if not self.once(run_id, crash if n == 0 else "none", delay):
                return
        raise AssertionError(f"run {run_id} never finished in {limit} attempts")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()


def read_events(path):
    events = []
    with open(path, "rb") as f:
        for raw in f.read().splitlines():
            try:
                events.append(json.loads(raw))
            except ValueError:
                pass  # a line cut by a kill
    return events


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


def where_for(kind, tmp_path, request):
    if kind.startswith("postgres-"):
        pytest.importorskip(kind.split("-", 1)[1])
        return request.getfixturevalue("postgres_server").conninfo
    where = str(tmp_path / "stores")
    os.makedirs(where, exist_ok=True)
    return where


CHOSEN = ["request_P:0", "request_a:0", "request_b:1", "request_P:1", "charge_before",
          "charge_after", "lookup_before", "lookup_after", "write:2", "write:3", "write:5",
          "write:7", "write:9", "write:11", "write:13", "write:16", "write:19"]


@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_at_chosen_points_of_a_parent_with_children(kind, tmp_path, request):
    where = where_for(kind, tmp_path, request)
    session = f"chosen-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path / "events.log"
    attempts = Attempts(kind, where, session, log_path)
    run_ids = []
    try:
        for n, crash in enumerate(CHOSEN):
            run_id = f"r{n}"
            run_ids.append(run_id)
            attempts.until_done(run_id, crash)
            assert attempts.crashes.get(run_id) == 1, (crash, attempts.crashes)
        assert not attempts.once(run_ids[0])  # a redelivered job: replayed
    finally:
        attempts.close()
    events = check_runs(kind, where, session, log_path, run_ids)
    assert [e[3] for e in events if e[0] == run_ids[0] and e[1] == "result"][-1] is True


def random_crashes(kind, where, log_path, seed):
    rng = random.Random(seed)
    session = f"random-{uuid.uuid4().hex[:8]}"
    attempts = Attempts(kind, where, session, log_path)
    run_ids = []
    try:
        n = 0
        while sum(attempts.crashes.values()) < RANDOM_CRASHES:
            n += 1
            run_id = f"q{n}"
            run_ids.append(run_id)
            attempts.until_done(run_id, kill_after=lambda k: (
                rng.uniform(0.0, 0.15) if k < 8 and rng.random() < 0.8 else None))
    finally:
        attempts.close()
    return session, attempts.crashes, run_ids


def test_kill_9_at_random_points_of_a_parent_with_children_100_times_per_store(
        tmp_path, request):
    """The stores' loops run at once, each driving its own processes."""
    out, failures = {}, []

    def loop(kind, where):
        try:
            out[kind] = random_crashes(kind, where, tmp_path / f"{kind}.log", seed=kind)
        except BaseException as exc:  # noqa: B036 - re-raised in the test's thread
            failures.append(exc)

    wheres = {kind: where_for(kind, tmp_path / kind, request) for kind in KINDS}
    threads = [threading.Thread(target=loop, args=(k, w)) for k, w in wheres.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(1800)
    if failures:
        raise failures[0]
    for kind, (session, crashes, run_ids) in out.items():
        check_runs(kind, wheres[kind], session, tmp_path / f"{kind}.log", run_ids)
        assert sum(crashes.values()) >= RANDOM_CRASHES
        print(f"{kind}: {len(run_ids)} runs, {sum(crashes.values())} crashes")


if __name__ == "__main__" and sys.argv[1:2] == ["zygote"]:
    zygote(*sys.argv[2:6])
