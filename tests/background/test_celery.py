"""Durable runs on Celery with a Redis broker, killed with kill -9 while they run.

Three real worker processes take 20 agent runs; every ~2 s one worker, chosen at random, is
killed with SIGKILL (its whole process group, as a crashed pod) and a new one started. The
broker redelivers a killed worker's job (``acks_late`` + the visibility timeout) and the job
calls ``agent.prompt(prompt, run_id=<job id>)`` again, which continues the run from the store.
Checked from the job log and the store: every run ends exactly once; a non-idempotent side
effect happens at most once per call, an idempotent one at least once; every history is
well-formed with no message twice; model requests stay within one more per attempt; and at
least one run really was finished by another worker than the one that started it.

The whole-worker test kills the only worker, with the doc's hour-long visibility timeout:
its runs come back at once only through the worker's start-up resume (``worker_ready``
re-enqueues every ``running`` run nobody holds, under its id).
"""

import os
import random
import subprocess
import sys
import time

import pytest
import real_parts

real_parts.require("celery")
from background_checks import (  # noqa: E402
    check_runs,
    kill,
    kill_workers_until_all_end,
    read_events,
)
from helpers import ROOT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 20
WORKERS = 3

pytestmark = pytest.mark.slow


def start_worker(env, n, logs):
    out = open(os.path.join(logs, f"worker-{n}.log"), "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-P", "solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING",
         "-n", f"w{n}@localhost"],
        cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def test_runs_end_exactly_once_while_workers_are_killed(redis_server, tmp_path):
    from celery import Celery

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), HERE]),
               CELERY_BROKER_URL=redis_server.url, JOB_LOG=str(tmp_path / "jobs.log"),
               JOB_DB=str(tmp_path / "runs.db"))
    client = Celery("client", broker=redis_server.url)
    prompts = [f"celery-run-{i}" for i in range(RUNS)]
    for prompt in prompts:
        client.send_task("celery_app.run_agent", args=[prompt])
    rng = random.Random(2026)
    workers = [start_worker(env, n, tmp_path) for n in range(WORKERS)]
    started = iter(range(WORKERS, WORKERS + 100))
    kills = kill_workers_until_all_end(
        workers, lambda victim: start_worker(env, next(started), tmp_path),
        tmp_path / "jobs.log", prompts, rng, max_kills=12)
    events = read_events(tmp_path / "jobs.log")
    assert {e["run"] for e in events if e["event"] == "end"} >= set(prompts), \
        f"not every run ended in time ({kills} kills)"
    assert kills >= 3
    check_runs(events, prompts, store_path=tmp_path / "runs.db")


def test_a_whole_worker_killed_comes_back_with_the_next_worker(redis_server, tmp_path):
    from celery import Celery

    log = tmp_path / "jobs.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), HERE]),
               CELERY_BROKER_URL=redis_server.url, JOB_LOG=str(log),
               JOB_DB=str(tmp_path / "runs.db"), CELERY_VISIBILITY_TIMEOUT="3600")
    client = Celery("client", broker=redis_server.url)
    prompts = [f"whole-worker-run-{i}" for i in range(2)]
    for prompt in prompts:
        client.send_task("celery_app.run_agent", args=[prompt])
    worker = start_worker(env, 0, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                e["event"] == "effect" for e in read_events(log)):
            time.sleep(0.05)  # polling the log for the moment to kill
    finally:
        kill(worker)
    events = read_events(log)
    assert any(e["event"] == "effect" for e in events), "the worker never got going"
    assert not any(e["event"] == "end" for e in events), "killed too late: a run had ended"
    worker = start_worker(env, 1, tmp_path)
    try:
        deadline = time.monotonic() + 90  # far below the visibility timeout's hour
        while time.monotonic() < deadline and not (
                {e["run"] for e in read_events(log) if e["event"] == "end"} >= set(prompts)):
            time.sleep(0.2)  # polling the log
    finally:
        kill(worker)
    events = read_events(log)
    assert {e["run"] for e in events if e["event"] == "end"} >= set(prompts), \
        "the killed worker's run did not come back (only the visibility timeout would)"
    assert any(e["event"] == "requeue" for e in events)
    check_runs(events, prompts, store_path=tmp_path / "runs.db")
