"""follow(): how long after a store write a follower in another process sees the message.

    python bench/follow_bench.py              # 200 writes per store and poll interval
    python bench/follow_bench.py --quick      # 50
    python bench/follow_bench.py --no-postgres

For JSONL, SQLite and PostgreSQL (a private server started here, when psycopg is installed):
a writer process appends one message every 20 ms (each carrying the wall-clock time its
append returned); this process follows the session with ``lattice.follow`` and records
when each message arrives. Reported per store and ``poll_s``: p50 and p99 of write -> seen,
next to the store's own ``version()`` read (what each poll costs), measured in the same run.

Target: p99 <= poll_s + 50 ms (a message is seen at the first poll after its write, plus
one load). PASS/FAIL is printed per row; the exit status is 1 when a row fails. Each
verdict is a percentile of one row's 200 (``--quick``: 50) latencies against a fixed
budget, not a ratio between contenders: no rounds (#39).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import lattice  # noqa: E402
from lattice.stores import JsonlHistoryStore, PostgresHistoryStore, SqliteHistoryStore  # noqa: E402

WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from bench.follow_bench import make_store
    kind, where, count = sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = make_store(kind, where)
    store.append({"role": "user", "content": "start"})
    time.sleep(0.5)  # the follower has started polling
    for i in range(count):
        store.append({"role": "user", "content": "x"})
        print(time.time(), flush=True)  # when the append returned (wall clock: two processes)
        time.sleep(0.02)  # the write pace
""")


def make_store(kind: str, where: str) -> Any:
    if kind == "jsonl":
        return JsonlHistoryStore(os.path.join(where, "s.jsonl"))
    if kind == "sqlite":
        return SqliteHistoryStore(os.path.join(where, "s.db"), "s")
    return PostgresHistoryStore(where, "follow-bench")


def percentile(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def one_row(kind: str, where: str, count: int, poll_s: float) -> Tuple[float, float, float]:
    """(p50 ms, p99 ms, version() read µs) for one store and poll interval."""
    store = make_store(kind, where)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, ROOT, kind, where, str(count)],
                              stdout=subprocess.PIPE, text=True)
    seen: List[float] = []
    for item in lattice.follow(store, after=1, poll_s=poll_s, wait_s=3.0):
        seen.append(time.time())
        if len(seen) == count:
            break
    written = [float(line) for line in writer.stdout or ()]
    writer.wait(30)
    lags = [(s - w) * 1000 for s, w in zip(seen, written)]
    started = time.perf_counter()
    for _ in range(200):
        store.version()
    version_us = (time.perf_counter() - started) / 200 * 1e6
    return percentile(lags, 50), percentile(lags, 99), version_us


def postgres() -> Optional[Any]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None
    from lattice.testing.postgres import TemporaryPostgres

    server = TemporaryPostgres()
    server.start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    count = 50 if args.quick else 200
    server = None if args.no_postgres else postgres()
    failed = False
    print(f"{'store':<10} {'poll_s':>6} {'p50 ms':>8} {'p99 ms':>8} {'version() us':>13}  verdict")
    try:
        kinds: List[Tuple[str, str]] = []
        with tempfile.TemporaryDirectory() as folder:
            kinds = [("jsonl", folder), ("sqlite", folder)]
            if server is not None:
                kinds.append(("postgres", server.conninfo))
            for kind, where in kinds:
                for poll_s in (0.25, 0.02):
                    if kind != "postgres":
                        for name in os.listdir(folder):
                            os.remove(os.path.join(folder, name))
                    else:
                        PostgresHistoryStore(where, "follow-bench").delete()
                    p50, p99, version_us = one_row(kind, where, count, poll_s)
                    ok = p99 <= poll_s * 1000 + 50
                    failed |= not ok
                    print(f"{kind:<10} {poll_s:>6} {p50:>8.1f} {p99:>8.1f} {version_us:>13.1f}  "
                          f"{'PASS' if ok else 'FAIL'} (p99 <= {poll_s * 1000 + 50:.0f} ms)")
    finally:
        if server is not None:
            server.stop()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
