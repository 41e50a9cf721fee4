"""Durable runs inside a DBOS workflow, recovered after kill -9.

A process starts three workflows (each one step: an agent run with ``run_id`` = the workflow
id) on a PostgreSQL system database and is killed with SIGKILL once the runs are under way.
A new process, started at once, launches DBOS, which recovers the pending workflows and
calls their step again; lattice continues each run from the store instead of starting it
over. The killed process's SQLite leases are made to outlive the restart (60 s), so the
recovered steps run only because a dead holder of this host is taken over at once (SPEC
21b); every workflow must end SUCCESS (a step that gave up on a busy session would leave
its workflow ERROR and its run ``running`` forever). The checks are
the Celery test's (every run ends once, side effects within their bounds, histories whole).
"""

import os
import signal
import subprocess
import sys
import time

import pytest
import real_parts

real_parts.require("dbos")
from background_checks import check_runs, read_events  # noqa: E402
from helpers import ROOT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.slow


def test_a_killed_workflow_is_recovered_and_its_runs_end_once(postgres_server, tmp_path):
    from urllib.parse import quote

    log = tmp_path / "jobs.log"
    url = (f"postgresql+psycopg://postgres@/dbos_lattice?host="
           f"{quote(postgres_server.socket_dir, safe='')}&port={postgres_server.port}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), HERE]), JOB_LOG=str(log),
               JOB_DB=str(tmp_path / "runs.db"), DBOS_SYSTEM_DATABASE_URL=url)
    first_env = dict(env, LEASE_TTL_S="60")
    prompts = [f"dbos-run-{i}" for i in range(3)]
    first = subprocess.Popen([sys.executable, "dbos_app.py", "start", *prompts], cwd=HERE,
                             env=first_env, stdout=open(tmp_path / "first.log", "wb"),
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        # kill once every run has made a side effect and none has ended
        while time.monotonic() < deadline:
            events = read_events(log)
            paid = {e["ref"].rsplit("-t", 1)[0] for e in events if e["event"] == "effect"}
            if paid >= set(prompts) or any(e["event"] == "end" for e in events):
                break
            time.sleep(0.05)  # polling the log for the moment to kill
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(10)
    events = read_events(log)
    assert not any(e["event"] == "end" for e in events), "killed too late: a run had ended"
    second = subprocess.run([sys.executable, "dbos_app.py", "recover", *prompts],
                            cwd=HERE, env=env, capture_output=True, timeout=180)
    assert second.returncode == 0, second.stdout.decode()[-2000:] + second.stderr.decode()[-2000:]
    events = read_events(log)
    check_runs(events, prompts, store_path=tmp_path / "runs.db")
