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
import subprocess
import sys

import pytest
import real_parts

real_parts.require("rq")
from background_checks import (  # noqa: E402
    check_runs,
    kill_workers_until_all_end,
    read_events,
)
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
    started = iter(range(WORKERS, WORKERS + 100))
    requeued = []

    def restart(victim):
        requeued.append(requeue_jobs_of(queue, names[victim]))
        n = next(started)
        names[victim] = f"w{n}"
        return start_worker(env, redis_server.url, n, tmp_path)

    kills = kill_workers_until_all_end(workers, restart, log, prompts, rng, max_kills=10)
    events = read_events(log)
    assert {e["run"] for e in events if e["event"] == "end"} >= set(prompts), \
        f"not every run ended in time ({kills} kills, {sum(requeued)} jobs requeued)"
    assert kills >= 3
    check_runs(events, prompts, store_path=tmp_path / "runs.db")
