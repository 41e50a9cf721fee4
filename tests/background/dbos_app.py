"""The DBOS app of tests/background/test_dbos.py: a durable workflow whose one step is an
agent run, with the workflow's id as the run's ``run_id``.

    python dbos_app.py start PROMPT...   # start one workflow per prompt, then wait (killed)
    python dbos_app.py recover PROMPT... # launch (DBOS recovers what was pending), wait for the
                                         # ends, exit 1 unless every workflow is SUCCESS

DBOS re-runs a step that was cut off by a crash; lattice makes that second call continue the
run instead of starting it again. The step is the recipe of docs/background-runs.md: one
agent run (``session_lock_wait_s=2``), retried by DBOS only on ``ConcurrentQueryError``.

``LEASE_TTL_S`` (start only) lengthens the SQLite lease of the process the test kills, so
its lease is certainly still unexpired when the recovering process starts: only a takeover
of the dead holder (SPEC 21b) lets the recovered step run.
"""

import os
import sys
import time

import agent_jobs as jobs
from dbos import DBOS, DBOSConfig, SetWorkflowID

from lattice import ConcurrentQueryError

config: DBOSConfig = {
    "name": "lattice-jobs",
    "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"],
    "application_version": "lattice-test",  # recovery picks up workflows of the same version
}
DBOS(config=config)


def alive_elsewhere(exc: BaseException) -> bool:
    return isinstance(exc, ConcurrentQueryError)


@DBOS.step(retries_allowed=True, should_retry=alive_elsewhere, interval_seconds=2.0,
           max_attempts=5)
def agent_step(prompt: str, run_id: str) -> str:
    return jobs.run(prompt, run_id)


@DBOS.workflow()
def agent_workflow(prompt: str) -> str:
    return agent_step(prompt, DBOS.workflow_id)


def statuses(prompts: list) -> dict:
    return {p: getattr(DBOS.get_workflow_status(f"wf-{p}"), "status", None) for p in prompts}


def wait_for_workflows(prompts: list, timeout_s: float = 120) -> dict:
    """The workflows' statuses once none is pending any more (or at the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = statuses(prompts)
        if time.monotonic() > deadline or all(
                state not in (None, "PENDING", "ENQUEUED") for state in found.values()):
            return found
        time.sleep(0.2)  # polling DBOS's system database


if __name__ == "__main__":
    if sys.argv[1] == "start" and os.environ.get("LEASE_TTL_S"):
        import lattice.stores.sqlite_lease as lease

        lease.TTL_S = float(os.environ["LEASE_TTL_S"])
    DBOS.launch()
    if sys.argv[1] == "start":
        for prompt in sys.argv[2:]:
            with SetWorkflowID(f"wf-{prompt}"):
                DBOS.start_workflow(agent_workflow, prompt)
        time.sleep(600)  # the test kills this process mid-run
    else:
        found = wait_for_workflows(sys.argv[2:])
        DBOS.destroy()
        if any(state != "SUCCESS" for state in found.values()):
            sys.exit(f"workflows not all SUCCESS: {found}")
