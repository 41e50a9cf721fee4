"""Append throughput and load time of the JSONL and SQLite history stores.

    python bench/store_bench.py            # 100,000 messages per store
    python bench/store_bench.py --quick    # 10,000

Shows that an append costs the same at any history length: the 100 appends around
message #100 are timed against the 100 appends just before the end (ratio ~1 means
independent of length), and the time to load all N short messages.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lattice.stores import JsonlHistoryStore, SqliteHistoryStore  # noqa: E402

WINDOW = 100


def message(i: int) -> Dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": [{"type": "text", "text": f"message number {i}"}]}


def bench(name: str, make: Callable[[], Any], n: int) -> Dict[str, float]:
    store = make()
    early: List[float] = []
    late: List[float] = []
    late_start = n - WINDOW
    clock = time.perf_counter
    started = clock()
    for i in range(n):
        if WINDOW <= i < 2 * WINDOW or i >= late_start:
            t0 = clock()
            store.append(message(i))
            (early if i < late_start else late).append(clock() - t0)
        else:
            store.append(message(i))
    total = clock() - started
    loads = []
    for _ in range(3):
        fresh = make()  # a new Agent's store: nothing cached
        t0 = clock()
        loaded = fresh.load()
        loads.append(clock() - t0)
        assert len(loaded) == n, (name, len(loaded))
        fresh.close()
    store.close()
    result = {
        "appends_per_s": n / total,
        "early_us": statistics.median(early) * 1e6,
        "late_us": statistics.median(late) * 1e6,
        "early_total_ms": sum(early) * 1e3,
        "late_total_ms": sum(late) * 1e3,
        "load_s": min(loads),
    }
    result["ratio"] = result["late_us"] / result["early_us"]
    return result


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages instead")
    parser.add_argument("-n", type=int, default=None, help="messages per store")
    args = parser.parse_args(argv)
    n = args.n or (10_000 if args.quick else 100_000)
    if n < 3 * WINDOW:
        parser.error(f"-n must be at least {3 * WINDOW}")
    print(f"{n:,} messages per store; medians of single appends around #{WINDOW} "
          f"and #{n - WINDOW // 2:,}")
    with tempfile.TemporaryDirectory() as tmp:
        jsonl_path = os.path.join(tmp, "h.jsonl")
        db_path = os.path.join(tmp, "h.db")
        cases = [
            ("jsonl", lambda: JsonlHistoryStore(jsonl_path)),
            ("sqlite", lambda: SqliteHistoryStore(db_path, "bench")),
        ]
        header = (f"{'store':<8}{'appends/s':>11}{'early µs':>10}{'late µs':>9}"
                  f"{'late/early':>11}{'load s':>8}")
        print(header)
        for name, make in cases:
            r = bench(name, make, n)
            print(f"{name:<8}{r['appends_per_s']:>11,.0f}{r['early_us']:>10.1f}"
                  f"{r['late_us']:>9.1f}{r['ratio']:>11.2f}{r['load_s']:>8.3f}")
        print(f"jsonl file: {os.path.getsize(jsonl_path) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
