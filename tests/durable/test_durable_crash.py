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
import random
import signal
import subprocess
import sys
import time
import uuid

import pytest
import real_parts
from store_kinds import ROOT, TESTS, make_store

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

TURNS = 3
REQUESTS = TURNS + 1  # an uninterrupted run's model requests
RANDOM_CRASHES = 100


# -- the attempt (in a forked process) ----------------------------------------------------------

def run_attempt(kind, where, session, run_id, crash, log_path):
    """One process's attempt at ``run_id``; ``crash`` is where it kills itself, if anywhere
    (``none``, ``request:<step>``, ``charge_before:<step>``, ``write:<n>``, ...)."""
    from lattice import Agent, ToolContext, tool

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(*event):
        os.write(fd, (json.dumps([run_id, *event]) + "\n").encode())

    point, _, at = crash.partition(":")
    writes = [0]

    def die_at(name, n=None):
        if point == name and (n is None or int(at) == n):
            os.kill(os.getpid(), signal.SIGKILL)

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

    store = make_store(kind, where, session, fail_on_error=True)
    for name in ("append", "save_run", "replace", "append_and_save_run"):
        real = getattr(store, name, None)
        if real is None:  # (only PostgreSQL writes a reply and a journal entry at once)
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


def zygote(kind, where, session, log_path):
    """Fork one attempt per command line ``<run_id> <crash>``; say ``pid N``; on ``reap``,
    wait for it and say ``exit N status``. Reaping only when told means the parent never
    signals a pid that could have been reused."""
    import lattice  # noqa: F401 - imported once here, so attempts start fast
    import lattice.stores.sqlite_lease as lease

    # A killed attempt's SQLite lease blocks the next one until it expires: 0.15 s, not 5 s.
    # (Attempts never overlap, so a late renewal never loses a lease here.)
    lease.TTL_S, lease.RENEW_S = 0.15, 0.03

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
    """A zygote for one store, and the bookkeeping of the runs attempted through it."""

    def __init__(self, kind, where, session, log_path):
        self.kind, self.where, self.session, self.log_path = kind, where, session, log_path
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT, TESTS, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "zygote", kind, where, session,
             str(log_path)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.crashes = {}

    def once(self, run_id, crash="none", kill_after=None):
        """One attempt; True if it was killed."""
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
        """Attempts until one returns: the first with ``crash``/``kill_after``, then plain
        (``kill_after`` may be a callable giving a delay or None per attempt)."""
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


def where_for(kind, tmp_path, request):
    if kind.startswith("postgres-"):
        real_parts.require(kind.split("-", 1)[1])
        return request.getfixturevalue("postgres_server").conninfo
    where = str(tmp_path / "stores")
    os.makedirs(where, exist_ok=True)
    return where


@pytest.mark.parametrize("kind", KINDS)
def test_kill_9_at_chosen_points_then_resume_with_the_same_run_id(kind, tmp_path, request):
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


def random_crashes(kind, where, log_path, seed):
    """The seeded loop: runs whose attempts are killed at random moments until at least
    RANDOM_CRASHES crashes landed; returns (session, crashes, run_ids)."""
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
                rng.uniform(0.0, 0.12) if k < 8 and rng.random() < 0.8 else None))
    finally:
        attempts.close()
    return session, attempts.crashes, run_ids


def test_kill_9_at_random_points_at_least_100_times_per_store(tmp_path, request):
    """The three stores' loops run at once, each driving its own processes."""
    import threading

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
        check_runs(kind, wheres[kind], session, tmp_path / f"{kind}.log", crashes, run_ids)
        assert sum(crashes.values()) >= RANDOM_CRASHES
        print(f"{kind}: {len(run_ids)} runs, {sum(crashes.values())} crashes")


if __name__ == "__main__" and sys.argv[1:2] == ["zygote"]:
    zygote(*sys.argv[2:6])
