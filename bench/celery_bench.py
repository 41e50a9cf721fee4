"""Throughput of short agent runs through Celery, with and without ``run_id``.

    python bench/celery_bench.py            # 7 rounds of 100 runs each way
    python bench/celery_bench.py --rounds 9

A private Redis (``redis-server`` on a free port) and two real Celery workers (solo pool,
``acks_late``); each job is one agent run (one model reply, a SQLite store, a session per
run). The two ways take turns, round by round (``_rounds.interleave``), so a busy moment on
a shared machine hits both. Reported: runs/s each way (median over rounds, min-max) and the
ratio durable / plain taken within each round, its median with min-max. Target: the
durable path (``run_id`` = the job's id: a run record before, and its end after) within
1.1x of the plain one; judged from 5 rounds or more, only shown with fewer (#39). Needs
``celery[redis]`` and ``redis-server``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, interleave, judge, verdict_text  # noqa: E402
from redis_fixture import TemporaryRedis  # noqa: E402

RUNS = 100
TARGET = 1.1


def lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def one_round(client, log: str, durable: bool, tag: str) -> float:
    before = lines(log)
    started = time.perf_counter()
    for i in range(RUNS):
        client.send_task("_celery_jobs.run", args=[f"{tag}-{i}", durable])
    deadline = time.monotonic() + 300
    while lines(log) < before + RUNS:
        if time.monotonic() > deadline:
            raise SystemExit("the workers did not finish the round in 300 s")
        time.sleep(0.005)  # polling the jobs' log
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"rounds of {RUNS} runs each way (default {DEFAULT_ROUNDS}; "
                        f"fewer than {MIN_ROUNDS}: shown, not judged)")
    args = parser.parse_args()
    from celery import Celery

    redis = TemporaryRedis()
    redis.start()
    folder = tempfile.mkdtemp(prefix="lattice-celery-bench-")
    log = os.path.join(folder, "jobs.log")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]),
               CELERY_BROKER_URL=redis.url, BENCH_DB=os.path.join(folder, "runs.db"),
               BENCH_LOG=log)
    workers = [subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "_celery_jobs", "worker", "-P", "solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING",
         "-n", f"bench{n}@localhost"], cwd=HERE, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True) for n in range(2)]
    client = Celery("bench", broker=redis.url)
    tags = itertools.count()  # a fresh session per run, every round
    try:
        one_round(client, log, False, "warm")  # workers up, tables made
        measured = interleave([lambda: one_round(client, log, False, f"p{next(tags)}"),
                               lambda: one_round(client, log, True, f"d{next(tags)}")],
                              args.rounds, warm=False)
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        redis.stop()
    plain, durable = measured.times
    ratio = measured.ratios[1]  # durable / plain within each round
    ok = judge(ratio, lambda v: v <= TARGET)
    print(f"{args.rounds} interleaved rounds of {RUNS} runs each way: median (min-max)")
    print(f"plain:   {Spread([RUNS / t for t in plain.values]).text('.1f')} runs/s")
    print(f"run_id:  {Spread([RUNS / t for t in durable.values]).text('.1f')} runs/s")
    print(f"ratio:   {ratio.text()}  {verdict_text(ok)} (target <= {TARGET}x)")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 1 if ok is False else 0


if __name__ == "__main__":
    sys.exit(main())
