"""The Celery app of tests/background/test_celery.py: the settings and the start-up resume
docs/background-runs.md recommends, with a visibility timeout scaled down to the tests'
seconds-long runs (``CELERY_VISIBILITY_TIMEOUT`` sets it; the whole-worker test keeps the
doc's hour, so only the start-up resume can bring its runs back)."""

import os

import agent_jobs as jobs
from celery import Celery
from celery.signals import worker_ready

app = Celery("lattice_jobs", broker=os.environ["CELERY_BROKER_URL"])
app.conf.update(
    task_acks_late=True,                # a job is acknowledged when it returns, not when taken
    task_reject_on_worker_lost=True,    # a killed worker's job goes back to the queue
    worker_prefetch_multiplier=1,       # a worker holds one job at a time
    task_serializer="json",
    broker_connection_retry_on_startup=True,
    # Redis redelivers a job that nobody acknowledged within the visibility timeout: it must
    # be longer than a run (here runs take ~2 s); swept every second instead of every 100.
    broker_transport_options={"visibility_timeout": int(os.environ.get(
                                  "CELERY_VISIBILITY_TIMEOUT", "8")),
                              "unacked_restore_interval": 1,
                              "unacked_restore_throttle": 1},
)


@app.task(bind=True, max_retries=None)
def run_agent(self, prompt):
    try:
        return jobs.run(prompt, run_id=self.request.id)
    except jobs.ConcurrentQueryError as exc:  # the run is still alive elsewhere: later
        raise self.retry(exc=exc, countdown=1) from exc


@worker_ready.connect
def resume_unfinished_runs(**_):
    """A worker that starts puts back, under their ids, the runs a dead worker left
    ``running`` (their jobs would come back only after the visibility timeout)."""
    for prompt, run_id in jobs.unfinished_runs(os.environ["JOB_DB"]):
        jobs.log("requeue", run=prompt, run_id=run_id)
        run_agent.apply_async(args=[prompt], task_id=run_id)
