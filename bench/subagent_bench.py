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
Exit status 1 on a miss, 2 without valgrind (``--wall`` measures wall-clock time instead,
noisy on a shared machine). ``--runs N`` counts each size N times and keeps the least (a
busy machine makes threads wait longer, which now and then adds instructions).

Measured on the 2-vCPU development VM (valgrind, one run): isolated 0.82x (465k against
565k instructions per delegation: ``as_tool`` makes no new Agent per call), shared 1.07x
(457k against 426k).

    python bench/subagent_bench.py [--wall] [--runs N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # instructions.py beside it

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


def per_call_seconds(kind: str, runs: int) -> float:
    def one(n: int) -> float:
        best = float("inf")
        for _ in range(max(runs, 5)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--worker", kind, str(n)], check=True)
            best = min(best, time.perf_counter() - t0)
        return best

    return (one(LARGE * 5) - one(SMALL)) / (LARGE * 5 - SMALL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not valgrind")
    parser.add_argument("--runs", type=int, default=1, help="runs per size (the least kept)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        workload(args.worker[0], int(args.worker[1]))
        return 0
    if not args.wall and shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured "
              "(--wall measures wall-clock time)")
        return 2
    measure = per_call_seconds if args.wall else per_call_instructions
    unit = "us" if args.wall else "instructions"
    scale = 1e6 if args.wall else 1.0
    print(f"per delegation ({unit}), subagent tool vs a hand-written tool calling prompt()")
    print(f"{'row':10} {'hand-written':>14} {'subagent':>14} {'ratio':>7}")
    passed = True
    for row, (mine, hand) in ROWS.items():
        ours, theirs = measure(mine, args.runs) * scale, measure(hand, args.runs) * scale
        ratio = ours / theirs
        ok = ratio <= TARGET
        passed = passed and ok
        print(f"{row:10} {theirs:14.0f} {ours:14.0f} {ratio:7.3f}  "
              f"{'PASS' if ok else 'FAIL'} (target <= {TARGET})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
