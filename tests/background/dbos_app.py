"""The DBOS app of tests/background/test_dbos.py: a durable workflow whose one step is an
agent run, with the workflow's id as the run's ``run_id``.

    python dbos_app.py start PROMPT...   # start one workflow per prompt, then wait (killed)
    python dbos_app.py recover N         # launch (DBOS recovers what was pending), wait for N ends

DBOS re-runs a step that was cut off by a crash; lattice makes that second call continue the
run instead of starting it again.
"""

import os
import sys
import time

import agent_jobs as jobs
from dbos import DBOS, DBOSConfig, SetWorkflowID

config: DBOSConfig = {
    "name": "lattice-jobs",
    "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"],
    "application_version": "lattice-test",  # recovery picks up workflows of the same version
}
DBOS(config=config)


@DBOS.step()
def agent_step(prompt: str, run_id: str) -> str:
    return jobs.run_until_free(prompt, run_id)


@DBOS.workflow()
def agent_workflow(prompt: str) -> str:
    return agent_step(prompt, DBOS.workflow_id)


def wait_for_ends(count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(os.environ["JOB_LOG"], encoding="utf-8") as f:
            if sum('"event": "end"' in line for line in f) >= count:
                return
        time.sleep(0.2)  # polling the log the steps write


if __name__ == "__main__":
    DBOS.launch()
    if sys.argv[1] == "start":
        for prompt in sys.argv[2:]:
            with SetWorkflowID(f"wf-{prompt}"):
                DBOS.start_workflow(agent_workflow, prompt)
        time.sleep(600)  # the test kills this process mid-run
    else:
        wait_for_ends(int(sys.argv[2]))
        DBOS.destroy()
