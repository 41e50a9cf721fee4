"""Where the web chat's agent runs: a background job, never the web request.

A chat message or an approval becomes a *run* with a fresh ``run_id``; the web request only
enqueues it and returns, and the page follows the run through ``lattice.follow()`` (see
app.py). The job calls ``agent.prompt(..., run_id=run_id)``, so a job delivered twice (a
worker killed mid-run, a redelivery after a deploy) continues the run instead of starting
it again, and a job delivered after the run ended replays its result.

Two ways to run jobs, chosen by the environment:
- ``CELERY_BROKER_URL`` (or ``LATTICE_BROKER_URL``) set: Celery with that broker (Redis);
  start workers with ``celery --workdir examples/web_chat -A jobs worker``.
- otherwise: a thread pool in the web process, so the example starts with one command.
  Runs a restart left unfinished are resumed when the app starts (``resume_unfinished``).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

from backend import Backend, send_email  # noqa: F401  (send_email: the demo's tool)

import lattice

DB_PATH = os.environ.get("WEB_CHAT_DB", ".agent-sessions/web_chat.db")
BROKER_URL = os.environ.get("CELERY_BROKER_URL") or os.environ.get("LATTICE_BROKER_URL")
SYSTEM = "You are a helpful assistant. You can send emails."
LOCK_WAIT_S = 5.0  # a redelivered job waits this long for a dying holder's lease

_backend = Backend()


def make_agent(user: str, db_path: str = DB_PATH) -> lattice.Agent:
    """One Agent on the user's stored conversation (the store is the state)."""
    store = lattice.SqliteHistoryStore(db_path, session_id=user)
    return lattice.Agent(**_backend.options(), tools=[send_email], history_store=store,
                         system=SYSTEM, session_lock_wait_s=LOCK_WAIT_S)


def pending_calls(user: str, db_path: str = DB_PATH) -> List[lattice.ToolCall]:
    """The calls of the user's conversation waiting for a decision (reads the store only:
    no model is started for it)."""
    store = lattice.SqliteHistoryStore(db_path, session_id=user)
    try:
        agent = lattice.Agent(model="none", model_client=_no_model, tools=[send_email],
                              history_store=store)
        return agent.pending_approvals()
    finally:
        store.close()


def _no_model(request: Any) -> Dict[str, Any]:
    raise RuntimeError("pending_calls never asks a model")


def run_chat(user: str, run_id: str, message: Optional[str] = None,
             approvals: Optional[Dict[str, bool]] = None, db_path: str = DB_PATH) -> str:
    """The job: one run of the user's conversation (a message, or approval decisions)."""
    agent = make_agent(user, db_path)
    result = agent.prompt(message, approvals=approvals, run_id=run_id)
    return result.subtype


def unfinished_runs(db_path: str = DB_PATH) -> List[Tuple[str, str, Any]]:
    """``(user, run_id, prompt)`` of every run the store says is still ``running``. Some may
    be alive in another process: resuming one of those is harmless (the job waits for the
    session lock, then finds the run ended and replays it), so no holder is probed here; a
    crashed holder of this host is taken over at once (of another host: its lease runs out
    within seconds)."""
    store = lattice.SqliteHistoryStore(db_path, session_id="-")
    try:
        return [(r["session_id"], r["run_id"], r.get("prompt"))
                for r in store.list_runs(state="running", all_sessions=True)]
    finally:
        store.close()


class ThreadRunner:
    """Runs jobs in a pool of threads of the web process."""

    def __init__(self, db_path: str = DB_PATH, workers: int = 4) -> None:
        self.db_path = db_path
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chat-job")

    def submit(self, user: str, run_id: str, message: Optional[str] = None,
               approvals: Optional[Dict[str, bool]] = None) -> None:
        self.pool.submit(self._run, user, run_id, message, approvals)

    def _run(self, user: str, run_id: str, message: Optional[str],
             approvals: Optional[Dict[str, bool]]) -> None:
        for _ in range(20):
            try:
                run_chat(user, run_id, message, approvals, self.db_path)
                return
            except lattice.ConcurrentQueryError:
                time.sleep(0.5)  # the session's holder died moments ago: its lease runs out
            except Exception:  # noqa: BLE001 - the run's failure is in the store for the page
                return

    def resume_unfinished(self) -> int:
        """Submit again the runs a stopped server left running (their records say what)."""
        runs = unfinished_runs(self.db_path)
        for user, run_id, prompt in runs:
            self.submit(user, run_id, prompt)
        return len(runs)

    def close(self) -> None:
        self.pool.shutdown(wait=False)


class CeleryRunner:
    """Sends jobs to Celery workers (``celery --workdir examples/web_chat -A jobs worker``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def submit(self, user: str, run_id: str, message: Optional[str] = None,
               approvals: Optional[Dict[str, bool]] = None) -> None:
        self.app.send_task("jobs.chat_task", args=[user, message, approvals], task_id=run_id)

    def resume_unfinished(self) -> int:
        # A worker process killed while its worker lives on: the job is redelivered at once
        # (task_reject_on_worker_lost). A whole worker killed: the broker hands the job back
        # only after the visibility timeout; meanwhile the page says the run was interrupted
        # and a new message supersedes it (app.py), so nothing waits for that.
        return 0

    def close(self) -> None:
        pass


def _celery_app() -> Any:
    from celery import Celery

    app = Celery("web_chat", broker=BROKER_URL)
    app.conf.update(
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        task_serializer="json", broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": int(os.environ.get("WEB_CHAT_VISIBILITY_S", "600")),
            "unacked_restore_interval": 1, "unacked_restore_throttle": 1})

    @app.task(bind=True, name="jobs.chat_task", max_retries=None)
    def chat_task(self: Any, user: str, message: Optional[str],
                  approvals: Optional[Dict[str, bool]]) -> str:
        try:
            return run_chat(user, self.request.id, message, approvals)
        except lattice.ConcurrentQueryError as exc:  # alive elsewhere, or a lease not out yet
            raise self.retry(exc=exc, countdown=1) from exc

    return app


celery_app = _celery_app() if BROKER_URL else None  # `celery -A jobs worker` finds it


def make_runner(db_path: str = DB_PATH) -> Any:
    if celery_app is not None:
        return CeleryRunner(celery_app)
    return ThreadRunner(db_path)

