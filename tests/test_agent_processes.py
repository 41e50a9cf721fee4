"""SPEC 14 with real Agents: many processes, many sessions, random queries, random kill -9s.

Each worker process loops: pick a session at random, take that session's Agent (kept from an
earlier query, or a new one) and run ``Agent.prompt`` with a deterministic model that calls a
tool zero, one or two times before answering; some queries are cut short by a deadline
(counted from the query's first model request, so it lands inside the query however slowly
the machine takes the session lock and loads the history). Every prompt is unique (``P <tag>``) and the model's answer names
it (``A:<tag>``), so a session's stored history can be cut into query blocks and each block
checked against what its query would have written.

An observer logs, to the worker's own log file, when each query starts (its first model
request, so after the session lock is taken) and ends (``query_end``, still under the lock).
``time.monotonic`` is one clock for every process of the machine. At each model request the
observer also compares what the Agent sends with what the store holds at that moment: a
long-lived Agent that failed to reload a history another process changed would differ.

The parent kills workers with SIGKILL, preferably while they are in a query, and starts new
ones. The run lasts at least ``RUN_S`` and goes on (up to ``RUN_LIMIT_S``, for a slow or loaded
machine) until it has seen what it is about: both endings, enough queries, and at least
``KILLS`` kills of which one landed inside a query. Afterwards: every history (loaded by a fresh Agent, which repairs a killed query's
open turn) is well-formed; every completed query's prompt and answer are there, once, in one
contiguous block; a block is never anything but a prefix of its query's messages (a killed
or cut query's last call answered as not run); and no two queries of one session
overlapped in time.
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib

import pytest
from helpers import read_log
from store_kinds import ROOT, TESTS, make_store

pytestmark = [pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals"),
              pytest.mark.slow]

KINDS = ("jsonl", "sqlite", "postgres-psycopg")
WORKERS = 8
SESSIONS = 20
RUN_S = 6.0
RUN_LIMIT_S = 120.0
KILLS = 4
MIN_QUERIES = 40


# -- the worker (this file run as a script) ---------------------------------------------

def plan(tag):
    """How many tool turns the query ``tag`` makes before answering (0, 1 or 2)."""
    return zlib.crc32(tag.encode()) % 3


def call_id(tag, step):
    return f"toolu_{tag}_{step}"


def model(request):
    """The scripted model: ``plan(tag)`` tool turns, then the answer ``A:<tag>``."""
    messages = request.messages
    start = max(i for i, m in enumerate(messages)
                if isinstance(m["content"], str) and m["content"].startswith("P "))
    tag = messages[start]["content"][2:]
    step = sum(1 for m in messages[start:] if m["role"] == "assistant")
    time.sleep(random.random() * 0.005)
    if step < plan(tag):
        return {"content": [{"type": "text", "text": f"step {step}"},
                            {"type": "tool_use", "id": call_id(tag, step), "name": "note",
                             "input": {"tag": tag, "step": step}}]}
    return f"A:{tag}"


def note(tag: str, step: int) -> str:
    """Take a note (slowly enough that kills land inside tool calls too)."""
    time.sleep(random.random() * 0.015)
    return f"noted {tag} {step}"


def worker(kind, where, sessions, me, log_path):
    from lattice import AbortController, Agent, ConcurrentQueryError, tool
    from lattice.observe.observer import Observer

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(*event):  # one write per line: a kill leaves at most one torn line
        os.write(fd, (json.dumps(event) + "\n").encode())

    def plain(messages):
        return [[m["role"], m["content"]] for m in messages]

    class QueryLog(Observer):
        def __init__(self, sid):
            self.sid = sid
            self.check = make_store(kind, where, sid)  # reads behind the Agent's back

        def query_start(self, model_name, prompt):
            return {"tag": prompt[2:], "started": False, "ended": False,
                    "mutex": threading.Lock(), "cut": cuts.pop(prompt[2:], None)}

        def model_start(self, query, request):
            # The worker thread may get here just after the query ended (an abort): then
            # the query has given the session back, and neither time nor store means much.
            with query["mutex"]:
                if query["ended"]:
                    return
                if not query["started"]:
                    query["started"] = True
                    log("start", self.sid, query["tag"], time.monotonic())
                    if query["cut"] is not None:  # the deadline runs from here
                        query["cut"].start()
                sent, stored = plain(request.messages), plain(self.check.load())
                if sent != stored:
                    same = next((i for i, (a, b) in enumerate(zip(sent, stored)) if a != b),
                                min(len(sent), len(stored)))
                    log("mismatch", self.sid, query["tag"], f"{len(sent)} messages sent, "
                        f"{len(stored)} stored, first difference at {same}")

        def query_end(self, token, result, error):
            with token["mutex"]:
                token["ended"] = True
                if token["cut"] is not None:
                    token["cut"].cancel()
                if token["started"]:
                    log("end", self.sid, token["tag"], time.monotonic(),
                        result.subtype if result is not None else repr(error))

    cuts = {}  # tag -> the timer that will cut that query short, once it has started
    rng = random.Random(me)
    note_tool = tool(note)
    agents = {}
    print("ready", flush=True)
    sys.stdin.readline()  # the parent says go, then closes stdin to say stop
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    q = 0
    while not stop.is_set():
        sid = f"s{rng.randrange(sessions)}"
        q += 1
        tag = f"{me}-{q}"
        agent = agents.get(sid)
        if agent is None or rng.random() < 0.5:  # a long-lived Agent, or a new one
            agent = agents[sid] = Agent(
                model="m", model_client=model, tools=[note_tool], observers=[QueryLog(sid)],
                history_store=make_store(kind, where, sid, fail_on_error=True),
                session_lock_wait_s=rng.choice([0.0, 0.02, 0.1, 0.5]))
        # Some queries are cut short by a deadline (the query ends with a write in flight,
        # or a tool call answered as not run).
        abort = rng.random() < 0.15
        controller = AbortController() if abort else None
        if controller is not None:
            cuts[tag] = threading.Timer(rng.uniform(0.001, 0.02), controller.abort,
                                        [TimeoutError("the query's deadline passed")])
            cuts[tag].daemon = True
        try:
            result = agent.prompt(f"P {tag}",
                                  signal=controller.signal if controller else None)
        except ConcurrentQueryError:
            log("refused", sid, tag)
            continue
        except Exception as exc:
            log("error", sid, tag, f"{type(exc).__name__}: {exc}")
            continue
        finally:
            cuts.pop(tag, None)  # a query refused before it began
        if abort and result.subtype == "error_abort":
            continue
        if result.subtype != "success" or result.result != f"A:{tag}":
            log("error", sid, tag, f"{result.subtype}: {result.result!r} {result.error!r}")


# -- the parent -------------------------------------------------------------------------

def in_a_query(path):
    """Whether the worker logging to ``path`` is inside a query (its last event a start)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 512))
            last = f.read().decode(errors="replace").splitlines()[-1]
        return json.loads(last)[0] == "start"
    except (OSError, IndexError, ValueError):
        return False


def signature(message):
    """What a stored message is, as ``(kind, tag or ids, is_error)``."""
    content = message["content"]
    if message["role"] == "user" and isinstance(content, str) and content.startswith("P "):
        return ("prompt", content[2:], False)
    blocks = content if isinstance(content, list) else []
    uses = tuple(b["id"] for b in blocks if b.get("type") == "tool_use")
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if message["role"] == "assistant" and uses:
        return ("call", uses, False)
    if message["role"] == "user" and results:
        return ("result", tuple(b["tool_use_id"] for b in results),
                any(b.get("is_error") for b in results))
    texts = [b.get("text") for b in blocks if b.get("type") == "text"]
    if message["role"] == "assistant" and len(texts) == 1 and texts[0].startswith("A:"):
        return ("answer", texts[0][2:], False)
    return ("other", json.dumps(message), False)


def expected_block(tag):
    out = [("prompt", tag)]
    for step in range(plan(tag)):
        out += [("call", (call_id(tag, step),)), ("result", (call_id(tag, step),))]
    return out + [("answer", tag)]


def query_blocks(history, sid):
    """The history cut at each prompt: ``{tag: [signature, ...]}``; a tag twice fails."""
    blocks = {}
    current = None
    for i, message in enumerate(history):
        sig = signature(message)
        if sig[0] == "prompt":
            assert sig[1] not in blocks, f"prompt {sig[1]} stored twice in {sid}"
            current = blocks[sig[1]] = []
        assert current is not None, f"{sid} message {i} comes before any prompt: {message}"
        current.append(sig)
    return blocks


def check_block(tag, block, completed, sid):
    want = expected_block(tag)
    got = [s[:2] for s in block]
    assert got == want[:len(got)], (
        f"{sid}: query {tag} is not one query's messages in order (interleaved or "
        f"duplicated):\n  stored {got}\n  query  {want}")
    if completed:
        assert got == want, f"{sid}: completed query {tag} lost messages: {got}"
    if got == want:
        assert not any(s[2] for s in block), f"{sid}: completed query {tag} has an error " \
                                             f"result: {block}"
    else:
        # A killed query: only its last step may be a repair (a call answered as unfinished).
        assert not any(s[2] for s in block[:-1]), f"{sid}: {tag} {block}"


def spawn(kind, where, me, log_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS,
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "worker", kind, where, str(SESSIONS), me,
         str(log_path)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def seen_enough(logs, kills, landed, began):
    """Whether the run has shown what the test checks (so it may stop now)."""
    if time.monotonic() - began < RUN_S or kills < KILLS or not landed:
        return False
    ended = {e[2]: e[4] for path in logs.values() for e in read_log(path) if e[0] == "end"}
    return set(ended.values()) >= {"success", "error_abort"} and len(ended) >= MIN_QUERIES


def run_workers(kind, where, tmp_path, rng):
    """Run the workers (killing some), stop them, wait for them; ``(logs, killed_at)``."""
    procs, logs, killed_at = {}, {}, {}
    running, joining, failures = set(), [], []

    def start(n):
        me = f"w{n}"
        logs[me] = tmp_path / f"{me}.log"
        procs[me] = spawn(kind, where, me, logs[me])
        return me

    def ready(me):
        assert procs[me].stdout.readline().strip() == "ready", me
        return me

    def go(me):
        procs[me].stdin.write("go\n")
        procs[me].stdin.flush()
        running.add(me)

    def replace():
        # A new worker takes seconds to start on a loaded machine: the run goes on meanwhile.
        me = start(len(procs))

        def when_ready():
            try:
                go(ready(me))
            except Exception as exc:  # reported by the assert below
                failures.append(exc)

        joining.append(threading.Thread(target=when_ready))
        joining[-1].start()

    try:
        first = [ready(me) for me in [start(n) for n in range(WORKERS)]]
        began = time.monotonic()  # all started: the run begins now
        for me in first:
            go(me)
        kills, landed = 0, False
        while not seen_enough(logs, kills, landed, began) \
                and time.monotonic() - began < RUN_LIMIT_S:
            time.sleep(rng.uniform(0.2, RUN_S / (2 * KILLS)))  # a random moment to kill at
            if kills >= KILLS and landed:
                continue  # only waiting for enough queries of both endings
            alive = [me for me in sorted(running) if procs[me].poll() is None]
            busy = [me for me in alive if in_a_query(logs[me])]
            victim = rng.choice(busy or alive)
            killed_at[victim] = time.monotonic()  # it held its lock until some time after
            os.kill(procs[victim].pid, signal.SIGKILL)
            assert procs[victim].wait(30) == -signal.SIGKILL, victim
            running.discard(victim)
            kills += 1
            landed = landed or in_a_query(logs[victim])
            replace()
        for thread in joining:
            thread.join(120)
        assert not failures, failures
        for proc in procs.values():
            proc.stdin.close()  # stop
        for proc in procs.values():
            proc.wait(60)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            if not proc.stdin.closed:
                proc.stdin.close()
    for me, proc in procs.items():
        assert proc.returncode == (-signal.SIGKILL if me in killed_at else 0), me
    return logs, killed_at


def check_no_overlap(events, killed_at):
    """No two queries of one session ran at once (a killed query ran until its kill)."""
    spans = {}
    for event in events:
        me = event[2].split("-")[0]
        if event[0] == "start":
            spans.setdefault((event[1], event[2]), [event[3], None, me])
        elif event[0] == "end":
            spans[(event[1], event[2])][1] = event[3]
    unfinished = [key for key, (_, end, me) in spans.items() if end is None]
    for key in unfinished:
        me = spans[key][2]
        assert me in killed_at, f"query {key} started and never ended, and {me} was not killed"
        spans[key][1] = max(spans[key][0], killed_at[me])
    by_session = {}
    for (sid, tag), (start, end, _) in spans.items():
        by_session.setdefault(sid, []).append((start, end, tag))
    for sid, runs in by_session.items():
        runs.sort()
        for (_, end, tag), (start, _, other) in zip(runs, runs[1:]):
            assert start >= end, f"{tag} and {other} overlapped in session {sid}"
    return unfinished


@pytest.mark.parametrize("kind", KINDS)
def test_agents_in_many_processes_with_kills_keep_every_history_whole(kind, tmp_path, request):
    from lattice import Agent
    from lattice.testing import ScriptedModelClient, assert_well_formed, history_problems

    if kind.startswith("postgres-"):
        pytest.importorskip(kind.split("-", 1)[1])
        where = request.getfixturevalue("postgres_server").conninfo
        for s in range(SESSIONS):
            make_store(kind, where, f"s{s}").delete()
    else:
        where = str(tmp_path / "stores")
        os.mkdir(where)
    logs, killed_at = run_workers(kind, where, tmp_path, random.Random(kind))

    events = [e for path in logs.values() for e in read_log(path)]
    problems = [e for e in events if e[0] in ("mismatch", "error")]
    assert not problems, f"{len(problems)} problems, the first: {problems[0]}"
    ended = {e[2]: e[4] for e in events if e[0] == "end"}
    assert set(ended.values()) == {"success", "error_abort"}, set(ended.values())
    refused = sum(1 for e in events if e[0] == "refused")
    assert len(ended) >= MIN_QUERIES, f"only {len(ended)} queries ran ({refused} refused)"
    unfinished = check_no_overlap(events, killed_at)
    assert unfinished, "no kill landed inside a query"

    stored = 0
    for s in range(SESSIONS):
        sid = f"s{s}"
        raw = make_store(kind, where, sid).load()
        # Before repair, only a killed query's open turn at the very end may be unanswered.
        assert all("has no tool_result" in p for p in history_problems(raw)), (sid, raw)
        fresh = Agent(model="m", model_client=ScriptedModelClient([]),
                      history_store=make_store(kind, where, sid))
        history = fresh.get_history()
        assert_well_formed(history)
        repaired = make_store(kind, where, sid).load()
        assert_well_formed(repaired)
        assert repaired == history
        blocks = query_blocks(history, sid)
        for tag, block in blocks.items():
            check_block(tag, block, ended.get(tag) == "success", sid)
        finished_here = {e[2] for e in events if e[0] == "end" and e[1] == sid
                         and e[4] == "success"}
        assert finished_here <= set(blocks), f"{sid} lost {finished_here - set(blocks)}"
        stored += len(blocks)
    assert stored >= len(ended)
    print(f"{kind}: {len(ended)} queries ran ({list(ended.values()).count('error_abort')} "
          f"cut by a deadline), {refused} refused, {len(killed_at)} workers killed, "
          f"{len(unfinished)} of them in a query")


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    kind_, where_, sessions_, me_, log_path_ = sys.argv[2:7]
    worker(kind_, where_, int(sessions_), me_, log_path_)
