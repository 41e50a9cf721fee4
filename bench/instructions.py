"""The agent loop's cost in CPU instructions, this tree against an older release, counted
by valgrind (callgrind): unlike wall-clock time it does not move with the load of a shared
machine, so a 5% difference can be seen.

Each figure is the difference between two runs of the same workload at two sizes, divided
by the difference in size, so interpreter start-up and imports cancel out:

* per turn: a ``prompt()`` / ``query()`` tool loop of 50 and of 300 turns (the same model
  client and tool as ``compare_versions.py``: a plain object whose ``create`` returns the
  reply, so no test double's checks are counted);
* per query: 10 and 110 one-turn queries (the model answers at once), the history cleared
  after each.

Target (issue 22: "within 5% of the previous release"): new/old <= 1.05 per turn; the
per-query rows are printed beside them. Exit status 1 on a miss, 2 without valgrind.

    python bench/instructions.py [--old /tmp/v02]      # a checkout of 0.2 (2a53dd7)

``--this`` judges this tree alone, in instructions (#39), the verdicts that wall-clock
benches cannot give on a loaded machine (``loop_overhead.py`` runs them too):

* ``query()`` per tool turn / ``prompt()`` per tool turn, with a model client that says it
  can be aborted from another thread (``abortable = True``: the loop runs on the
  consumer's thread): with no signal (nothing can end a batch, so it runs there too: no
  hand-off) and with an abort signal (each batch on a tool thread an abort can leave: one
  hand-off a tool turn; ``prompt()`` then keeps its worker, one a query): <= 1.1 both;
  with one that does not say so (the worker's two hand-offs: shown). Both loops run on a
  thread other than the main one, as in a server (on the main thread a query keeps its
  worker);
* per turn at 500 turns / at 50 (``prompt()`` and ``query()``): <= 1.5, a turn must not cost
  more as the history grows;
* a 1-turn ``prompt()`` on a 10,000-message conversation / on an empty one: <= 1.5;
* a durable SQLite run's instructions per turn over a plain one's (shown: its target,
  +50 us, is judged by ``durable_bench.py``).

Each per-turn figure is (I(n2) - I(n1)) / (n2 - n1). Valgrind runs one thread at a time:
these counts hold the hand-offs' instructions, not what a wake-up waits.

    python bench/instructions.py --this
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

NEW = Path(__file__).resolve().parents[1]
TARGET = 1.05
SIZES: Dict[str, Tuple[int, int]] = {"prompt() per turn": (50, 300),
                                     "query() per turn": (50, 300),
                                     "prompt() per 1-turn query": (10, 110),
                                     "query() per 1-turn query": (10, 110)}


def workload(tree: str, what: str, size: int) -> None:
    """Run in the measured interpreter: ``what`` at ``size`` with ``tree``'s lattice."""
    sys.path.insert(0, tree)
    from lattice import Agent, tool

    @tool
    def step(n: int) -> str:
        """Advance one step."""
        return f"step {n} done"

    streaming = what.startswith("query")
    if what.endswith("per turn"):
        agent = Agent(model="bench", model_client=_Model(size, False), tools=[step],
                      max_turns=size + 1)
        runs = 1
    else:
        agent = Agent(model="bench", model_client=_Model(1, False), tools=[step])
        runs = size
    for _ in range(runs):
        if streaming:
            for _message in agent.query("go"):
                pass
        else:
            agent.prompt("go")
        if runs > 1:
            agent.replace_history([])


class _Model:
    """The model of every workload: tool calls up to ``turns``, then an answer.
    It returns at once, so saying it can be aborted (``abortable``) is true of it."""

    def __init__(self, turns: int, abortable: bool) -> None:
        self.turns = turns
        self.abortable = abortable

    def create(self, request):  # type: ignore[no-untyped-def]
        k = (len(request.messages) + 1) // 2
        usage = {"input_tokens": 10, "output_tokens": 2}
        if k >= self.turns:
            return {"content": [{"type": "text", "text": "finished"}],
                    "stop_reason": "end_turn", "usage": usage}
        return {"content": [{"type": "tool_use", "id": f"toolu_{k}", "name": "step",
                             "input": {"n": k}}], "stop_reason": "tool_use", "usage": usage}


THIS: Dict[str, str] = {  # --this workloads: name -> what ``this_workload`` runs
    "prompt": "a prompt() tool loop of SIZE turns",
    "query": "a query() tool loop of SIZE turns",
    "prompt-abortable": "the same, the client says abortable = True",
    "query-abortable": "the same, the client says abortable = True",
    "prompt-abortable-signal": "the same, with an abort signal (AbortController)",
    "query-abortable-signal": "the same, with an abort signal (AbortController)",
    "one-turn-0": "SIZE 1-turn prompt()s on an empty conversation",
    "one-turn-10000": "SIZE 1-turn prompt()s on a 10,000-message conversation",
    "sqlite-plain": "a prompt() tool loop of SIZE turns, SQLite store",
    "sqlite-durable": "the same with a run_id",
}


def this_workload(tree: str, what: str, size: int) -> None:
    """Run in the measured interpreter: one of ``THIS`` with ``tree``'s lattice."""
    sys.path.insert(0, tree)
    import tempfile

    from lattice import Agent, SqliteHistoryStore, tool

    @tool
    def step(n: int) -> str:
        """Advance one step."""
        return f"step {n} done"

    if what.startswith("one-turn"):
        agent = Agent(model="bench", model_client=_Model(0, False))
        history = int(what.rsplit("-", 1)[1])
        seeded: List[Dict[str, object]] = [{"role": "user", "content": "start"}]
        for i in range(history // 2):
            seeded.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{i}", "name": "step", "input": {"n": i}}]})
            seeded.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{i}", "content": "earlier"}]})
        agent.replace_history(seeded)
        agent.prompt("warm")
        for _ in range(size):
            agent.prompt("next")
        return
    model = _Model(size, "abortable" in what)
    if what.startswith("sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteHistoryStore(f"{tmp}/runs.db", "bench")
            agent = Agent(model="bench", model_client=model, tools=[step],
                          max_turns=size + 1, history_store=store)
            run_id = "run-1" if what == "sqlite-durable" else None
            assert agent.prompt("go", run_id=run_id).num_turns == size
            store.close()
        return
    agent = Agent(model="bench", model_client=model, tools=[step], max_turns=size + 1)
    from lattice import AbortController

    signal = AbortController().signal if what.endswith("-signal") else None

    def run() -> None:
        if what.startswith("query"):
            for _message in agent.query("go", signal=signal):
                pass
        else:
            agent.prompt("go", signal=signal)

    # Off the main thread, as in a server (on the main thread a query keeps its worker,
    # out of Ctrl-C's reach: lattice/query/inline.py); prompt() alike, to compare.
    import threading

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def this_count(job: Tuple[str, int, int]) -> int:
    """One count of ``job`` (what, size, repeat): repeat r hashes with seed r + 1."""
    return counted([__file__, "--this-worker", str(NEW), job[0], str(job[1])],
                   hash_seed=job[2] + 1)


Row = Tuple[str, float, Optional[bool]]  # name, figure, verdict (None: shown)
# A string hash seed moves a count by up to 3% (dict and set probes): each repeat runs
# every workload with its own fixed seed, so a figure is the same from run to run.
REPEATS = 3


def this_rows(parallel: int = 2) -> List[Row]:
    """This tree's verdicts in instructions (the ``--this`` list in the docstring). Each
    count is taken ``REPEATS`` times, each with its own hash seed, and each figure is the
    median of the repeats' figures (their min-max printed): the seed changes a count by a
    few percent, how two threads interleave by less, the load of the machine not at all."""
    from concurrent.futures import ThreadPoolExecutor

    # Spans of 100+ turns: a 50-turn difference moves by up to 10% from run to run.
    sizes = {"prompt": (50, 150, 500, 600), "query": (50, 150, 500, 600),
             "prompt-abortable": (50, 300), "query-abortable": (50, 300),
             "prompt-abortable-signal": (50, 300), "query-abortable-signal": (50, 300),
             "one-turn-0": (10, 110), "one-turn-10000": (10, 110),
             "sqlite-plain": (20, 120), "sqlite-durable": (20, 120)}
    jobs = [(what, n, r) for r in range(REPEATS) for what, ns in sizes.items() for n in ns]
    with ThreadPoolExecutor(max_workers=parallel) as pool:  # one valgrind per core
        counts = dict(zip(jobs, pool.map(this_count, jobs)))

    def per(what: str, a: int, b: int, r: int) -> float:
        return (counts[(what, b, r)] - counts[(what, a, r)]) / (b - a)

    def figure(top: Tuple[str, int, int], bottom: Tuple[str, int, int]) -> Tuple[float, str]:
        """The median over repeats of per(top) / per(bottom), and how it is shown."""
        ratios = sorted(per(*top, r) / per(*bottom, r) for r in range(REPEATS))
        tops = sorted(per(*top, r) for r in range(REPEATS))
        bottoms = sorted(per(*bottom, r) for r in range(REPEATS))
        mid = REPEATS // 2
        return ratios[mid], (f"{tops[mid] / 1e3:.0f}k / {bottoms[mid] / 1e3:.0f}k, "
                             f"{ratios[0]:.3f}-{ratios[-1]:.3f} over {REPEATS} runs")

    rows: List[Row] = []
    for client, suffix in (("abortable = True, no signal: no hand-off", "-abortable"),
                           ("abortable = True, a signal: one hand-off a tool turn",
                            "-abortable-signal"),
                           ("not abortable: two hand-offs a tool turn", "")):
        span = (50, 300) if suffix else (50, 150)
        value, shown = figure(("query" + suffix, *span), ("prompt" + suffix, *span))
        rows.append((f"query()/prompt() per tool turn, client {client} ({shown})", value,
                     value <= QUERY_TARGET if suffix else None))
    for mode in ("prompt", "query"):
        value, shown = figure((mode, 500, 600), (mode, 50, 150))
        rows.append((f"{mode}() per turn at 500 turns / at 50 ({shown})", value, value <= 1.5))
    value, shown = figure(("one-turn-10000", 10, 110), ("one-turn-0", 10, 110))
    rows.append((f"1-turn prompt() at 10,000 messages / at 0 ({shown})", value, value <= 1.5))
    extra = sorted(per("sqlite-durable", 20, 120, r) - per("sqlite-plain", 20, 120, r)
                   for r in range(REPEATS))
    value, shown = figure(("sqlite-durable", 20, 120), ("sqlite-plain", 20, 120))
    rows.append((f"durable SQLite run per turn / plain ({shown}; +{extra[REPEATS // 2] / 1e3:.0f}k "
                 "instructions a turn)", value, None))
    return rows


QUERY_TARGET = 1.1


def print_rows(rows: List[Row]) -> bool:
    width = max(len(r[0]) for r in rows)
    for name, figure, ok in rows:
        verdict = "shown" if ok is None else "PASS" if ok else "FAIL"
        print(f"{name:{width}}  {figure:6.3f}  {verdict}")
    return all(ok is not False for _, _, ok in rows)


def instructions(tree: Path, what: str, size: int) -> int:
    """Instructions of one run of ``workload`` under callgrind."""
    return counted([__file__, "--worker", str(tree), what, str(size)])


def counted(argv: List[str], hash_seed: Optional[int] = None) -> int:
    """The instructions of ``python argv...`` under callgrind (this interpreter; child
    processes, such as a server, are not followed), with ``PYTHONHASHSEED`` if given."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               os.path.realpath(sys.executable), *argv]
    env = None if hash_seed is None else {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(found.group(1))


def per_unit(tree: Path, what: str) -> float:
    small, large = SIZES[what]
    return (instructions(tree, what, large) - instructions(tree, what, small)) / (large - small)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="/tmp/v02")
    parser.add_argument("--this", action="store_true",
                        help="judge this tree alone (#39), no old tree needed")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--this-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.this_worker:
        tree, what, size = args.this_worker
        this_workload(tree, what, int(size))
        return 0
    if args.worker:
        tree, what, size = args.worker
        workload(tree, what, int(size))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 2
    if args.this:
        print(f"instructions (valgrind) of this tree, {NEW}")
        return 0 if print_rows(this_rows()) else 1
    old = Path(args.old).resolve()
    if not (old / "lattice" / "__init__.py").is_file():
        print(f"--old {args.old}: no lattice package there (git worktree add {args.old} "
              "2a53dd7, the 0.2 release)")
        return 2
    print(f"instructions (valgrind), old: {old}, new: {NEW}")
    print(f"{'measure':30} {'old':>10} {'new':>10} {'new/old':>8}")
    passed = True
    for what in SIZES:
        before, after = per_unit(old, what), per_unit(NEW, what)
        ratio = after / before
        verdict = ""
        if what.endswith("per turn"):
            passed = passed and ratio <= TARGET
            verdict = f"  {'PASS' if ratio <= TARGET else 'FAIL'} (target <= {TARGET})"
        print(f"{what:30} {before:10.0f} {after:10.0f} {ratio:8.3f}{verdict}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
