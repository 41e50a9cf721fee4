"""Durable runs on RQ, killed with kill -9 while they run.

RQ does not hand a dead worker's job to another worker at once (it retries an abandoned job
only after its heartbeat runs out, a minute later), so here the supervisor that replaces a
killed worker puts the jobs that worker held back in the queue, as docs/background-runs.md
shows; the job keeps its id, which is the run's id, so the new delivery continues the run.
Three real ``SimpleWorker`` processes take 20 runs; every ~2 s one is killed (SIGKILL) and
replaced. The checks are the Celery test's.
"""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("rq")
from background_checks import check_runs, read_events  # noqa: E402
from helpers import ROOT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 20
WORKERS = 3

pytestmark = pytest.mark.slow


def requeue_jobs_of(queue, worker_name):
    """What a supervisor does for a worker it found dead: its started jobs, queued again."""
    from rq.job import Job
    from rq.registry import StartedJobRegistry

    registry = StartedJobRegistry(queue=queue)
    requeued = 0
    for job_id in registry.get_job_ids(cleanup=False):
        job = Job.fetch(job_id, connection=queue.connection)
        if job.worker_name == worker_name:
            registry.remove_executions(job)
            queue.enqueue_job(job)
            requeued += 1
    return requeued


def start_worker(env, redis_url, n, logs):
    out = open(os.path.join(logs, f"rq-worker-{n}.log"), "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "rq.cli", "worker", "--url", redis_url, "--name", f"w{n}",
         "--worker-class", "rq.worker.SimpleWorker", "--logging_level", "WARNING", "lattice"],
        cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(10)


def test_runs_end_exactly_once_while_workers_are_killed(redis_server, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(HERE)  # the job functions, importable by name as RQ needs
    import agent_jobs as jobs
    from redis import Redis
    from rq import Queue

    db, log = str(tmp_path / "runs.db"), str(tmp_path / "jobs.log")
    monkeypatch.setenv("JOB_LOG", log)
    monkeypatch.setenv("JOB_DB", db)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), HERE]))
    queue = Queue("lattice", connection=Redis.from_url(redis_server.url))
    prompts = [f"rq-run-{i}" for i in range(RUNS)]
    for prompt in prompts:
        queue.enqueue(jobs.rq_job, prompt, job_timeout=120)
    rng = random.Random(7)
    workers = [start_worker(env, redis_server.url, n, tmp_path) for n in range(WORKERS)]
    names = [f"w{n}" for n in range(WORKERS)]
    started, kills, requeued = WORKERS, 0, 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            ended = {e["run"] for e in read_events(log) if e["event"] == "end"}
            if ended >= set(prompts):
                break
            time.sleep(0.5)  # poll the log; the kills below are the test's own pacing
            if kills < 10 and len(ended) < RUNS - 2 and rng.random() < 0.25:
                victim = rng.randrange(WORKERS)
                kill(workers[victim])
                requeued += requeue_jobs_of(queue, names[victim])
                names[victim] = f"w{started}"
                workers[victim] = start_worker(env, redis_server.url, started, tmp_path)
                started, kills = started + 1, kills + 1
    finally:
        for process in workers:
            kill(process)
    events = read_events(log)
    assert {e["run"] for e in events if e["event"] == "end"} >= set(prompts), \
        f"not every run ended in time ({kills} kills, {requeued} jobs requeued)"
    assert kills >= 3
    check_runs(events, prompts, store_path=tmp_path / "runs.db")
