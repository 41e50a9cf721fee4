"""What the ``kill -9`` tests share (tests/durable/test_durable_crash.py,
tests/subagents/test_kills.py): a "zygote" process that has imported lattice and forks one
attempt at a run per request (so an attempt costs milliseconds, not an interpreter start),
the parent's side of it, and the seeded loop of attempts killed at random moments. What an
attempt does and what is checked afterwards stay in each test file."""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import real_parts
from store_kinds import ROOT, TESTS

RANDOM_CRASHES = 100


def zygote(run_attempt, kind, where, session, log_path):
    """Fork one ``run_attempt(kind, where, session, run_id, crash, log_path)`` per command
    line ``<run_id> <crash>``; say ``pid N``; on ``reap``, wait for it and say ``exit N
    status``. Reaping only when told means the parent never signals a pid that could have
    been reused."""
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


class Attempts:
    """A zygote for one store (``script`` is the test file that runs ``zygote`` when started
    as ``script zygote kind where session log_path``), and the crashes of the runs attempted
    through it."""

    def __init__(self, script, kind, where, session, log_path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT, TESTS, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(script), "zygote", kind, where, session,
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


def where_for(kind, tmp_path, request):
    """The store's place: PostgreSQL's conninfo, or a fresh folder under ``tmp_path``."""
    if kind.startswith("postgres-"):
        real_parts.require(kind.split("-", 1)[1])
        return request.getfixturevalue("postgres_server").conninfo
    where = str(tmp_path / "stores")
    os.makedirs(where, exist_ok=True)
    return where


def random_crashes(script, kind, where, log_path, seed, max_delay):
    """The seeded loop: runs whose attempts are killed after a random delay (up to
    ``max_delay`` seconds) until at least RANDOM_CRASHES crashes landed; returns (session,
    crashes, run_ids)."""
    rng = random.Random(seed)
    session = f"random-{uuid.uuid4().hex[:8]}"
    attempts = Attempts(script, kind, where, session, log_path)
    run_ids = []
    try:
        n = 0
        while sum(attempts.crashes.values()) < RANDOM_CRASHES:
            n += 1
            run_id = f"q{n}"
            run_ids.append(run_id)
            attempts.until_done(run_id, kill_after=lambda k: (
                rng.uniform(0.0, max_delay) if k < 8 and rng.random() < 0.8 else None))
    finally:
        attempts.close()
    return session, attempts.crashes, run_ids


def random_crashes_per_store(script, kinds, tmp_path, request, max_delay):
    """``random_crashes`` for every store kind at once, each loop driving its own processes;
    returns {kind: (where, log_path, session, crashes, run_ids)}."""
    out, failures = {}, []
    wheres = {kind: where_for(kind, tmp_path / kind, request) for kind in kinds}

    def loop(kind):
        log_path = tmp_path / f"{kind}.log"
        try:
            out[kind] = (wheres[kind], log_path) + random_crashes(
                script, kind, wheres[kind], log_path, seed=kind, max_delay=max_delay)
        except BaseException as exc:  # noqa: B036 - re-raised in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=loop, args=(kind,)) for kind in kinds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(1800)
    if failures:
        raise failures[0]
    for kind, (_, _, _, crashes, run_ids) in out.items():
        assert sum(crashes.values()) >= RANDOM_CRASHES, (kind, crashes)
        print(f"{kind}: {len(run_ids)} runs, {sum(crashes.values())} crashes")
    return out


def chosen_crashes(script, kind, where, session, log_path, chosen):
    """One run per crash point of ``chosen``, each killed there once and then resumed with
    the same run id until it returns; returns (attempts, run_ids), the zygote still open
    (the caller closes it)."""
    attempts = Attempts(script, kind, where, session, log_path)
    run_ids = []
    try:
        for n, crash in enumerate(chosen):
            run_id = f"r{n}"
            run_ids.append(run_id)
            attempts.until_done(run_id, crash)
            assert attempts.crashes.get(run_id) == 1, (crash, attempts.crashes)
    except BaseException:
        attempts.close()
        raise
    return attempts, run_ids


# -- in the attempt (a forked process) ----------------------------------------------------------

def event_log(log_path, run_id):
    """``log(*event)``: one line ``[run_id, *event]`` in one ``os.write``, so a kill never
    leaves half of one line inside another."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(*event):
        os.write(fd, (json.dumps([run_id, *event]) + "\n").encode())

    return log


def crash_at(crash):
    """``die_at(name, n=None)``: SIGKILL this process when ``crash`` (``name`` or
    ``name:n``) names this point."""
    point, _, at = crash.partition(":")

    def die_at(name, n=None):
        if point == name and (n is None or at == str(n)):
            os.kill(os.getpid(), signal.SIGKILL)

    return die_at


def effect_tools(effect):
    """The attempts' tools, each calling ``effect(name, context)`` as its side effect:
    ``charge`` (not safe to repeat) and ``lookup`` (idempotent)."""
    from lattice import ToolContext, tool

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

    return charge, lookup
