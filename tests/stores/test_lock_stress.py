"""Many processes, many sessions, random queries, random kill -9s: the session lock keeps
every history whole and no two queries of one session ever overlap.

Each worker runs "queries" the way the Agent does with a lockable store: take the lock,
load, repair a turn a killed query left open, append the prompt, (think), append the reply,
release. It logs when each query started and ended (``time.monotonic`` is one clock for
every process of the machine). The parent kills workers at random and starts new ones.
Workers run until the parent creates a stop file, not for a fixed time: on a loaded machine
a timed worker could end by itself just before its kill -9 and look like a survivor.
"""

import os
import random
import signal
import time

import pytest
from helpers import read_log
from store_kinds import PROCESS_KINDS, child, make_store

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

WORKERS = 6
SESSIONS = 10
RUN_S = 4.0
KILLS = 4

WORKER = """
    import json, random, sys, time
    from store_kinds import make_store
    from lattice import ConcurrentQueryError

    import os
    kind, where, sessions, me, log_path, stop_path = sys.argv[1:7]
    rng = random.Random(me)
    stores = {}
    until = time.monotonic() + 300  # only if the parent died without stopping us
    log = open(log_path, "a", buffering=1)
    print("ready", flush=True)
    q = 0
    while time.monotonic() < until and not os.path.exists(stop_path):
        sid = f"s{rng.randrange(int(sessions))}"
        store = stores.setdefault(sid, make_store(kind, where, sid))
        q += 1
        try:
            with store.lock(wait_s=rng.choice([0, 0.05, 0.3])):
                log.write(json.dumps(["start", sid, me, q, time.monotonic()]) + "\\n")
                history = store.load()
                if history and history[-1]["role"] == "user":  # a killed query's open turn
                    store.append({"role": "assistant", "content": "repair"})
                store.append({"role": "user", "content": f"{me}:{q}"})
                time.sleep(rng.random() * 0.01)
                store.append({"role": "assistant", "content": f"{me}:{q}"})
                log.write(json.dumps(["end", sid, me, q, time.monotonic()]) + "\\n")
        except ConcurrentQueryError:
            pass
"""


@pytest.mark.parametrize("kind", PROCESS_KINDS)
def test_random_queries_and_kills_keep_histories_whole_and_queries_apart(kind, tmp_path,
                                                                         request):
    if kind.startswith("postgres-"):
        pytest.importorskip(kind.split("-", 1)[1])
        where = request.getfixturevalue("postgres_server").conninfo
        for s in range(SESSIONS):
            make_store(kind, where, f"s{s}").delete()
    else:
        where = str(tmp_path)
    log_path = tmp_path / "queries.log"
    stop_path = tmp_path / "stop"
    rng = random.Random(kind)
    killed_at = {}
    procs = {}
    next_id = 0

    def spawn():
        nonlocal next_id
        me = f"w{next_id}"
        next_id += 1
        procs[me] = child(WORKER, kind, where, SESSIONS, me, log_path, stop_path)
        assert procs[me].stdout.readline().strip() == "ready"

    try:
        started = time.monotonic()
        for _ in range(WORKERS):
            spawn()
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.2, RUN_S / KILLS))
            alive = [m for m, p in procs.items() if p.poll() is None and m not in killed_at]
            assert alive, {m: p.returncode for m, p in procs.items()}  # none may end early
            victim = rng.choice(alive)
            os.kill(procs[victim].pid, signal.SIGKILL)
            killed_at[victim] = time.monotonic()
            procs[victim].wait(30)
            spawn()
        time.sleep(max(0.0, started + RUN_S - time.monotonic()))
        stop_path.touch()
        for proc in procs.values():
            proc.wait(120)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
    for me, proc in procs.items():
        assert proc.returncode == (-signal.SIGKILL if me in killed_at else 0), me

    events = read_log(log_path)
    starts = {(e[1], e[2], e[3]): e[4] for e in events if e[0] == "start"}
    ends = {(e[1], e[2], e[3]): e[4] for e in events if e[0] == "end"}
    assert len(ends) > 20, "too few queries ran to mean anything"
    for sid in {key[0] for key in starts}:
        # A query without an end was killed: it held the lock until its process died.
        spans = sorted((t, ends.get(key, killed_at.get(key[1], float("inf"))), key)
                       for key, t in starts.items() if key[0] == sid)
        for (_, end, key), (start, _, other) in zip(spans, spans[1:]):
            assert start >= end, f"{key} and {other} overlapped in session {sid}"

    for s in range(SESSIONS):
        sid = f"s{s}"
        history = make_store(kind, where, sid).load()
        finished = {f"{me}:{q}" for (session, me, q) in ends if session == sid}
        prompts = [m["content"] for m in history if m["role"] == "user"]
        assert len(prompts) == len(set(prompts)), f"a duplicated prompt in {sid}"
        assert finished <= set(prompts), f"a finished query lost in {sid}"
        for i, message in enumerate(history):
            assert message["role"] == ("user" if i % 2 == 0 else "assistant"), (sid, i)
            if message["role"] == "assistant" and message["content"] != "repair":
                assert message["content"] == history[i - 1]["content"], (sid, i)
