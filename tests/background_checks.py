"""Checks shared by the background-job tests (Celery, RQ, DBOS): the run-exactly-once rules
of SPEC 17, read from the jobs' log (tests/background/agent_jobs.py) and the SQLite store."""

import json
import os
import signal
import time
from collections import Counter, defaultdict

from lattice import SqliteHistoryStore
from lattice.testing import history_problems


def read_events(path):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    # A line cut by a kill mid-write is not an event.
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return events


def kill(process):
    """SIGKILL ``process``'s whole process group (as a crashed pod), and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(10)


def kill_workers_until_all_end(workers, restart, log_path, prompts, rng, *, max_kills):
    """Poll the jobs' log until every run of ``prompts`` ended (at most 240 s); every ~2 s,
    while runs remain, kill one worker chosen by ``rng`` and put ``restart(victim)`` (a new
    worker process) in its place. Every worker is killed at the end. Returns the kills."""
    kills = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            ended = {e["run"] for e in read_events(log_path) if e["event"] == "end"}
            if ended >= set(prompts):
                break
            time.sleep(0.5)  # poll the log; the kills below are the test's own pacing
            if kills < max_kills and len(ended) < len(prompts) - 2 and rng.random() < 0.25:
                victim = rng.randrange(len(workers))
                kill(workers[victim])
                workers[victim] = restart(victim)
                kills += 1
    finally:
        for process in workers:
            kill(process)
    return kills


def check_runs(events, prompts, *, store_path, turns=4):
    by_run = defaultdict(list)
    for event in events:
        if "run" in event:
            by_run[event["run"]].append(event)
    effects = Counter((e["tool"], e["ref"]) for e in events if e["event"] == "effect")
    resumed_elsewhere = 0
    for prompt in prompts:
        mine = by_run[prompt]
        fresh_ends = [e for e in mine if e["event"] == "end" and not e["replayed"]]
        starts = [e for e in mine if e["event"] == "start"]
        requests = [e for e in mine if e["event"] == "request"]
        if not fresh_ends:
            fresh_ends = [killed_after_the_end(prompt, mine, starts, requests, store_path,
                                               turns)]
        assert len(fresh_ends) == 1, (prompt, fresh_ends)
        assert fresh_ends[0]["subtype"] == "success", fresh_ends
        # one request per turn plus the answer, plus at most one lost per extra attempt
        assert len(requests) <= turns + 1 + (len(starts) - 1), (prompt, len(requests), len(starts))
        if fresh_ends[0]["pid"] != starts[0]["pid"]:
            resumed_elsewhere += 1
        history = SqliteHistoryStore(str(store_path), session_id=prompt).load()
        assert history_problems(history) == [], (prompt, history_problems(history))
        encoded = [json.dumps(m, sort_keys=True) for m in history]
        assert len(encoded) == len(set(encoded)), f"{prompt}: a message is stored twice"
        ids = [b["id"] for m in history if m["role"] == "assistant"
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        for tool_use_id in ids:
            ref = tool_use_id.rsplit("-", 1)[0]
            if tool_use_id.endswith("-pay"):
                assert effects[("pay", ref)] <= 1, f"{tool_use_id} paid twice"
            else:
                assert effects[("lookup", ref)] >= 1, f"{tool_use_id} never looked up"
    assert resumed_elsewhere >= 1, "no run was finished by another worker than its first"


def killed_after_the_end(prompt, mine, starts, requests, store_path, turns):
    """The end of a run whose ending attempt was killed after the store recorded the end
    but before its "end" line reached the log (a kill lands there now and then): the store
    must say the run ended in success, a later delivery must have replayed it, and an
    attempt that never logged an end must have made the run's final request. Returns that
    end as the log would have had it."""
    replays = [e for e in mine if e["event"] == "end" and e["replayed"]]
    assert replays, (prompt, "the run never ended")
    record = SqliteHistoryStore(str(store_path), session_id=prompt).load_run(starts[0]["run_id"])
    assert record is not None and record["state"] == "ended", (prompt, record)
    assert record["result"]["subtype"] == "success", (prompt, record["result"])
    ended_pids = {e["pid"] for e in mine if e["event"] == "end"}
    killed = [e["pid"] for e in requests if e["turn"] >= turns and e["pid"] not in ended_pids]
    assert killed, (prompt, "no fresh end, and no attempt killed after the final request")
    return {"event": "end", "run": prompt, "pid": killed[-1], "subtype": "success",
            "replayed": False}
