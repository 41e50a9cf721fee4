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
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

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

    class Model:
        def __init__(self, turns: int) -> None:
            self.turns = turns

        def create(self, request):  # type: ignore[no-untyped-def]
            k = (len(request.messages) + 1) // 2
            usage = {"input_tokens": 10, "output_tokens": 2}
            if k >= self.turns:
                return {"content": [{"type": "text", "text": "finished"}],
                        "stop_reason": "end_turn", "usage": usage}
            return {"content": [{"type": "tool_use", "id": f"toolu_{k}", "name": "step",
                                 "input": {"n": k}}], "stop_reason": "tool_use", "usage": usage}

    streaming = what.startswith("query")
    if what.endswith("per turn"):
        agent = Agent(model="bench", model_client=Model(size), tools=[step],
                      max_turns=size + 1)
        runs = 1
    else:
        agent = Agent(model="bench", model_client=Model(1), tools=[step])
        runs = size
    for _ in range(runs):
        if streaming:
            for _message in agent.query("go"):
                pass
        else:
            agent.prompt("go")
        if runs > 1:
            agent.replace_history([])


def instructions(tree: Path, what: str, size: int) -> int:
    """Instructions of one run of ``workload`` under callgrind."""
    return counted([__file__, "--worker", str(tree), what, str(size)])


def counted(argv: List[str]) -> int:
    """The instructions of ``python argv...`` under callgrind (this interpreter; child
    processes, such as a server, are not followed)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
               os.path.realpath(sys.executable), *argv]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stderr
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
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        tree, what, size = args.worker
        workload(tree, what, int(size))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing measured")
        return 2
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
