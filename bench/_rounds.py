"""Interleaved rounds for the wall-clock benches, and how their figures are printed (#39).

On a shared machine a busy second slows whatever runs in it, so contenders take turns:
each round runs every contender once (the order rotated from round to round), and a ratio
is taken within a round, then the median over rounds. A verdict on a wall-clock figure is
only given from ``MIN_ROUNDS`` rounds or more (``DEFAULT_ROUNDS`` unless asked), and the
figure is printed with its spread (min/median/max over the rounds): a verdict that one
noisy round can flip is not a verdict. Whatever can be counted in instructions instead is
judged there (``instructions.py``).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, List, Optional, Sequence

MIN_ROUNDS = 5  # fewer: the figure is shown, never judged
DEFAULT_ROUNDS = 7


class Spread:
    """Values over rounds: the median judges, min and max say how far noise moved it."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[float]) -> None:
        if not values:
            raise ValueError("a spread of no values")
        self.values = list(values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def judgeable(self) -> bool:
        return len(self.values) >= MIN_ROUNDS

    def text(self, fmt: str = ".2f", scale: float = 1.0) -> str:
        """``median (min-max, n rounds)``."""
        return (f"{self.median * scale:{fmt}} ({self.low * scale:{fmt}}-"
                f"{self.high * scale:{fmt}}, {len(self.values)} rounds)")


def judge(spread: Spread, ok: Callable[[float], bool]) -> Optional[bool]:
    """The verdict on the median, or None (shown only) with too few rounds."""
    return ok(spread.median) if spread.judgeable() else None


def verdict_text(ok: Optional[bool]) -> str:
    return "shown" if ok is None else "PASS" if ok else "FAIL"


class Rounds:
    """What ``interleave`` measured: each contender's times, and its time / the first
    contender's in the same round."""

    def __init__(self, times: List[List[float]]) -> None:
        self.times = [Spread(t) for t in times]
        self.ratios = [Spread([t / base for t, base in zip(slot, times[0])]) for slot in times]


def interleave(runs: Sequence[Callable[[], object]], rounds: int, *, warm: bool = True,
               clock: Callable[[], float] = time.perf_counter) -> Rounds:
    """Each of ``runs`` once per round, ``rounds`` rounds, the order rotated each round
    (after one warm-up run each, unless ``warm`` is False)."""
    if warm:
        for run in runs:
            run()
    times: List[List[float]] = [[] for _ in runs]
    for rep in range(rounds):
        order = list(range(len(runs)))
        order = order[rep % len(order):] + order[:rep % len(order)]
        for slot in order:
            started = clock()
            runs[slot]()
            times[slot].append(clock() - started)
    return Rounds(times)
