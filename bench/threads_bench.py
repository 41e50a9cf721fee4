"""Many threads, each running its own agent, against the fair ``requests`` floor (#39).

N threads (32 and 128 by default) each run a 50-turn tool loop against ``_minimal_server``
(a child process: its work is not in this process's CPU time): the floor (``http_loop``'s
bare ``requests`` loop, one session per thread), ``prompt()`` and ``query()`` (one Agent and
one ``AnthropicClient`` per thread, JSON replies). The three take turns in interleaved
rounds (``_rounds``, order rotated each round), and each figure is the median over rounds
of the ratio within a round, printed with its min and max:

* throughput: the floor's time / lattice's (the same turns: turns/s over the floor's).
  Targets: ``prompt()`` >= 0.95, ``query()`` >= 0.9;
* CPU per turn: this process's CPU time (``time.process_time``, all threads) / the floor's.
  Target <= 1.1 for both.

Without a signal nothing can end a query during a tool batch, so with these clients (they
can be aborted from another thread) neither makes a thread hand-off. ``query(signal=)``
(each batch on a thread an abort can leave: one hand-off a tool turn) runs beside them,
shown.

Thread hand-offs are what this measures beyond ``http_floor.py``: each one is a futex wake
and a GIL hand-over among hundreds of threads. On a loaded machine the figures move with
the load: run it on a quiet one, and read the spread.

    python bench/threads_bench.py [--threads 32 128] [--rounds 7] [--turns 50]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _minimal_server import minimal_server  # noqa: E402
from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, judge, verdict_text  # noqa: E402
from http_loop import KEY, MODEL, bare_loop, echo  # noqa: E402

import lattice  # noqa: E402

Row = Tuple[str, Spread, Optional[bool]]  # name, figure over rounds, verdict (None: shown)
TOOLS = [{"name": echo.name, "description": echo.description,
          "input_schema": echo.input_schema}]
TARGETS = {"prompt": 0.95, "query": 0.9}
CPU_TARGET = 1.1


def lattice_run(url: str, turns: int, iterate: bool, signal: bool = False) -> None:
    client = lattice.AnthropicClient(KEY, url, stream=False)
    agent = lattice.Agent(model=MODEL, model_client=client, tools=[echo], max_turns=turns + 1)
    stop = lattice.AbortController().signal if signal else None
    result = None
    if iterate:
        for result in agent.query("Run the steps.", signal=stop):
            pass
    else:
        result = agent.prompt("Run the steps.", signal=stop)
    assert result is not None and result.num_turns == turns, result
    client.close()


def many(n: int, run: Callable[[], None]) -> Tuple[float, float]:
    """``run`` in ``n`` threads at once: (seconds, CPU seconds of this process)."""
    threads = [threading.Thread(target=run) for _ in range(n)]
    cpu, started = time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, time.process_time() - cpu


def threads_rows(server: Callable[[int], str], rounds: int, n: int, turns: int = 50
                 ) -> List[Row]:
    url = server(turns)
    runs = {"floor": lambda: bare_loop(url, turns, False, TOOLS),
            "prompt": lambda: lattice_run(url, turns, False),
            "query": lambda: lattice_run(url, turns, True),
            "query+signal": lambda: lattice_run(url, turns, True, signal=True)}
    names = list(runs)
    for name in names:
        many(min(n, 8), runs[name])  # warm: imports, the server's threads
    wall: Dict[str, List[float]] = {name: [] for name in names}
    cpu: Dict[str, List[float]] = {name: [] for name in names}
    for rep in range(rounds):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            took, spent = many(n, runs[name])
            wall[name].append(took)
            cpu[name].append(spent)
    rows: List[Row] = []
    for name in ("prompt", "query"):
        speed = Spread([f / t for f, t in zip(wall["floor"], wall[name])])
        cost = Spread([c / f for c, f in zip(cpu[name], cpu["floor"])])
        target = TARGETS[name]
        rows.append((f"{n} threads x {turns} turns {name}() turns/s / floor's (>= {target})",
                     speed, judge(speed, lambda v, t=target: v >= t)))
        rows.append((f"{n} threads x {turns} turns {name}() CPU per turn / floor's "
                     f"(<= {CPU_TARGET})", cost, judge(cost, lambda v: v <= CPU_TARGET)))
    speed = Spread([f / t for f, t in zip(wall["floor"], wall["query+signal"])])
    cost = Spread([c / f for c, f in zip(cpu["query+signal"], cpu["floor"])])
    rows.append((f"{n} threads x {turns} turns query(signal=) turns/s / floor's", speed, None))
    rows.append((f"{n} threads x {turns} turns query(signal=) CPU per turn / floor's", cost,
                 None))
    floor_rate = Spread([n * turns / t for t in wall["floor"]])
    floor_cpu = Spread([c / (n * turns) for c in cpu["floor"]])
    rows.append((f"{n} threads: the floor's turns/s", floor_rate, None))
    rows.append((f"{n} threads: the floor's CPU us per turn", Spread(
        [v * 1e6 for v in floor_cpu.values]), None))
    return rows


def print_rows(rows: List[Row]) -> List[str]:
    """Print the rows; the names of those that failed."""
    width = max(len(r[0]) for r in rows)
    for name, spread, ok in rows:
        fmt = ".0f" if spread.median > 100 else ".2f"
        print(f"{name:{width}}  {spread.text(fmt):>28}  {verdict_text(ok)}")
    return [r[0] for r in rows if r[2] is False]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    if args.rounds < MIN_ROUNDS:
        print(f"(fewer than {MIN_ROUNDS} rounds: figures shown, not judged)")
    rows: List[Row] = []
    with minimal_server() as server:
        for n in args.threads:
            rows += threads_rows(server, args.rounds, n, args.turns)
    print("median over interleaved rounds (min-max)")
    failed = print_rows(rows)
    judged = [r for r in rows if r[2] is not None]
    print(f"\n{len(judged) - len(failed)}/{len(judged)} PASS" +
          (f"; FAIL: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
