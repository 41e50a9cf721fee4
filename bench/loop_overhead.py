"""Per-turn overhead of the agent loop, with no model and trivial tools.

A 50-turn and a 500-turn tool loop against ``FunctionModelClient``: microseconds per turn
(median of several runs), and the ratio 500/50 (per-turn cost must not grow with history).
Both ``prompt()`` and iterating ``query()`` are measured, and the cost of one thread
handoff round trip in the same run (the floor of ``query()``'s lockstep).

    python bench/loop_overhead.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lattice import Agent, tool  # noqa: E402
from lattice.testing import FunctionModelClient  # noqa: E402


@tool
def step(n: int) -> str:
    """Advance one step."""
    return f"step {n} done"


def make_agent(turns: int) -> Agent:
    def fn(request):
        n = (len(request.messages) + 1) // 2
        if n >= turns:
            return {"content": [{"type": "text", "text": "finished"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 10, "output_tokens": 2}}
        return {"content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "step",
                             "input": {"n": n}}], "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 2}}

    return Agent(model="bench", model_client=FunctionModelClient(fn, record=False), tools=[step],
                 max_turns=turns + 1)


def per_turn_us(turns: int, mode: str) -> float:
    agent = make_agent(turns)
    t0 = time.perf_counter()
    if mode == "prompt":
        result = agent.prompt("go")
    else:
        result = None
        for result in agent.query("go"):
            pass
    elapsed = time.perf_counter() - t0
    assert result.num_turns == turns, result
    return elapsed / turns * 1e6


def handoff_round_trip_us(n: int = 20_000) -> float:
    """The floor for query(): one thread handoff there and back on a Condition."""
    import threading

    cond = threading.Condition()
    state = [0]

    def other() -> None:
        for _ in range(n):
            with cond:
                while state[0] != 1:
                    cond.wait()
                state[0] = 2
                cond.notify()

    thread = threading.Thread(target=other)
    thread.start()
    t0 = time.perf_counter()
    for _ in range(n):
        with cond:
            state[0] = 1
            cond.notify()
            while state[0] != 2:
                cond.wait()
    elapsed = time.perf_counter() - t0
    thread.join()
    return elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'mode':8} {'turns':>6} {'us/turn (median)':>18}")
    for mode in ("prompt", "query"):
        figures = {}
        for turns in (50, 500):
            per_turn_us(turns, mode)  # warm-up
            figures[turns] = statistics.median(per_turn_us(turns, mode)
                                               for _ in range(args.repeat))
            print(f"{mode:8} {turns:>6} {figures[turns]:>18.1f}")
        print(f"{mode:8} ratio 500/50 = {figures[500] / figures[50]:.2f} "
              f"(target <= 1.5; target < 100 us/turn)")
    trip = handoff_round_trip_us()
    print(f"thread handoff round trip here: {trip:.1f} us. prompt() makes one per query; "
          "query() waits for its consumer at each yielded message (SPEC 5: a suspended "
          "query is still running), i.e. two round trips per tool turn, "
          f"floor ~{2 * trip:.0f} us/turn.")


if __name__ == "__main__":
    main()
