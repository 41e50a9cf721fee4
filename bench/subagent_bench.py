"""What a subagent costs over a hand-written tool that calls ``child.prompt()`` (issue 36:
target <= 1.1x), in CPU instructions counted by valgrind (``instructions.counted``), so a
loaded machine does not move the figure.

The workload: a parent whose model delegates ``n`` times, one call per turn, to a child
that answers at once (one model request; plain objects as model clients, as in
``instructions.py``). Each figure is per delegation: the difference between ``n`` = 20 and
``n`` = 120, divided by 100, so start-up and imports cancel out. Rows:

* isolated: ``child.as_tool()`` (a fresh conversation per call) against a tool that makes
  an ``Agent`` with the child's options and calls its ``prompt()``;
* shared: ``child.as_tool(isolated=False)`` against a tool that calls ``child.prompt()``
  on the one child Agent (its history grows in both).

What the subagent does beyond the hand-written tool: usage flows up (and is split by
model), the parent's budget and signal reach the child, approvals and cycles are checked.
Exit status 1 on a miss, 2 without valgrind. ``--runs N`` counts each size N times and
keeps the least (a busy machine makes threads wait longer, which now and then adds
instructions).

``--wall`` measures wall-clock time instead (20 and 600 delegations), noisy on a shared
machine: a row's four runs (each way, each size) take turns in ``--rounds`` interleaved
rounds (7 by default; ``_rounds``), the ratio is taken within each round and its median
judged, printed with its min-max; with fewer than 5 rounds it is shown, not judged (#39).

Measured on the 2-vCPU development VM (valgrind, one run): isolated 0.82x (465k against
565k instructions per delegation: ``as_tool`` makes no new Agent per call), shared 1.07x
(457k against 426k).

    python bench/subagent_bench.py [--runs N] | [--wall [--rounds 7]]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # instructions.py beside it

if TYPE_CHECKING:  # imported where used: the measured workers import nothing they need not
    from _rounds import Spread

TREE = Path(__file__).resolve().parents[1]
TARGET = 1.1
SMALL, LARGE = 20, 120
ROWS: Dict[str, Tuple[str, str]] = {"isolated": ("subagent-isolated", "hand-isolated"),
                                    "shared": ("subagent-shared", "hand-shared")}


def workload(kind: str, n: int) -> None:
    """Run in the measured interpreter: ``n`` delegations the ``kind`` way."""
    sys.path.insert(0, str(TREE))
    from lattice import Agent, tool

    class Parent:
        def create(self, request: Any) -> Dict[str, Any]:
            k = (len(request.messages) + 1) // 2
            usage = {"input_tokens": 10, "output_tokens": 2}
            if k > n:
                return {"content": [{"type": "text", "text": "finished"}],
                        "stop_reason": "end_turn", "usage": usage}
            return {"content": [{"type": "tool_use", "id": f"toolu_{k}", "name": "child",
                                 "input": {"prompt": f"task {k}"}}],
                    "stop_reason": "tool_use", "usage": usage}

    class Child:
        def create(self, request: Any) -> Dict[str, Any]:
            return {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 5, "output_tokens": 1}}

    options: Dict[str, Any] = dict(model="child-model", model_client=Child(),
                                   system="Do one task.", name="child")
    child = Agent(**options)
    if kind == "subagent-isolated":
        made = child.as_tool()
    elif kind == "subagent-shared":
        made = child.as_tool(isolated=False)
    elif kind == "hand-isolated":
        @tool(name="child")
        def made(prompt: str) -> str:
            """Do one task."""
            return Agent(**options).prompt(prompt).result or ""
    else:
        @tool(name="child")
        def made(prompt: str) -> str:
            """Do one task."""
            return child.prompt(prompt).result or ""
    parent = Agent(model="parent-model", model_client=Parent(), tools=[made],
                   max_turns=n + 2)
    result = parent.prompt("go")
    assert result.result == "finished", result


def per_call_instructions(kind: str, runs: int) -> float:
    from instructions import counted

    def one(n: int) -> int:
        return min(counted([__file__, "--worker", kind, str(n)]) for _ in range(runs))

    return (one(LARGE) - one(SMALL)) / (LARGE - SMALL)


def wall_row(mine: str, hand: str, rounds: int) -> Tuple[Spread, Spread, Spread]:
    """``--wall``: seconds per delegation the hand-written way and the subagent way, and
    their ratio within each round; the four runs of the row take turns in ``rounds`` rounds
    (after one warm-up run each: bytecode compiled, files cached)."""
    from _rounds import Spread, interleave

    small, large = SMALL, LARGE * 5

    def run(kind: str, n: int) -> Callable[[], object]:
        return lambda: subprocess.run([sys.executable, __file__, "--worker", kind, str(n)],
                                      check=True)

    times = interleave([run(k, n) for k in (hand, mine) for n in (small, large)], rounds).times

    def per_call(at_small: Spread, at_large: Spread) -> List[float]:
        return [(b - a) / (large - small) for a, b in zip(at_small.values, at_large.values)]

    theirs, ours = per_call(times[0], times[1]), per_call(times[2], times[3])
    return Spread(theirs), Spread(ours), Spread([o / t for o, t in zip(ours, theirs)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not valgrind")
    parser.add_argument("--runs", type=int, default=1, help="runs per size (the least kept)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="--wall: interleaved rounds (default _rounds.DEFAULT_ROUNDS, 7; "
                        "fewer than MIN_ROUNDS, 5: shown, not judged)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        workload(args.worker[0], int(args.worker[1]))
        return 0
    if not args.wall and shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured "
              "(--wall measures wall-clock time)")
        return 2
    if args.wall:
        return wall(args.rounds)
    print("per delegation (instructions), subagent tool vs a hand-written tool calling "
          "prompt()")
    print(f"{'row':10} {'hand-written':>14} {'subagent':>14} {'ratio':>7}")
    passed = True
    for row, (mine, hand) in ROWS.items():
        ours = per_call_instructions(mine, args.runs)
        theirs = per_call_instructions(hand, args.runs)
        ratio = ours / theirs
        ok = ratio <= TARGET
        passed = passed and ok
        print(f"{row:10} {theirs:14.0f} {ours:14.0f} {ratio:7.3f}  "
              f"{'PASS' if ok else 'FAIL'} (target <= {TARGET})")
    return 0 if passed else 1


def wall(rounds: Optional[int]) -> int:
    from _rounds import DEFAULT_ROUNDS, judge, verdict_text

    rounds = DEFAULT_ROUNDS if rounds is None else rounds
    print(f"per delegation (us, wall clock), subagent tool vs a hand-written tool calling "
          f"prompt(); median (min-max) over {rounds} interleaved rounds")
    print(f"{'row':10} {'hand-written':>26} {'subagent':>26} {'ratio':>28}")
    failed = False
    for row, (mine, hand) in ROWS.items():
        theirs, ours, ratio = wall_row(mine, hand, rounds)
        ok = judge(ratio, lambda v: v <= TARGET)
        failed = failed or ok is False
        print(f"{row:10} {theirs.text('.1f', 1e6):>26} {ours.text('.1f', 1e6):>26} "
              f"{ratio.text('.3f'):>28}  {verdict_text(ok)} (target <= {TARGET})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
