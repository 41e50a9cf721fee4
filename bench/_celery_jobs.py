"""The Celery app of bench/celery_bench.py: one short agent run per job (one model reply,
no tools), on a SQLite store, with or without ``run_id`` (the job's id)."""

import os

from celery import Celery

import lattice
from lattice.testing import FunctionModelClient

app = Celery("lattice_bench", broker=os.environ["CELERY_BROKER_URL"])
app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True,
                worker_prefetch_multiplier=1, task_serializer="json",
                broker_connection_retry_on_startup=True)


@app.task(bind=True)
def run(self, prompt: str, durable: bool) -> str:
    store = lattice.SqliteHistoryStore(os.environ["BENCH_DB"], session_id=prompt)
    agent = lattice.Agent(model="m", model_client=FunctionModelClient(lambda r: "done"),
                          history_store=store)
    result = agent.prompt(prompt, run_id=self.request.id if durable else None)
    fd = os.open(os.environ["BENCH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"done\n")  # one line per finished job, counted by the bench
    finally:
        os.close(fd)
    store.close()
    return result.subtype
