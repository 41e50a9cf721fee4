"""History stores: append throughput, load time, fsync cost and session-lock cost.

    python bench/store_bench.py            # 100,000 messages per store
    python bench/store_bench.py --quick    # 10,000
    python bench/store_bench.py --no-postgres

Four tables, all measured in this one run:

1. JSONL and SQLite: appends/s, whether an append costs the same at any history length
   (the 100 appends around message #100 against the 100 just before the end: late/early ~1),
   and the time a fresh store takes to load all N messages.
2. The same with ``fsync=True`` (``--fsync-n`` messages), next to the floor of this disk: a
   bare ``os.write`` + ``os.fsync`` loop on one file.
3. PostgreSQL (a private server started here, on a Unix socket; psycopg and/or pg8000,
   whichever is installed): the store's appends/s and load time next to the floor, a plain
   ``INSERT`` loop (``json.dumps`` + ``execute``) on one connection with the same driver
   into an identical table, and a plain ``SELECT`` + ``json.loads``. The two take turns in
   7 rounds, so a busy moment on a shared machine hits both; each ratio is the median of
   the ratios within a round, printed with its min-max. Target: within 1.3x of the floor.
4. ``with store.lock(): pass``: what the session lock adds to each query, per store.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, verdict_text  # noqa: E402

from lattice.stores import (  # noqa: E402
    JsonlHistoryStore,
    MemoryHistoryStore,
    PostgresHistoryStore,
    SqliteHistoryStore,
)
from lattice.stores.base import encode_message  # noqa: E402

WINDOW = 100
LOCKS = 300  # lock acquire+release rounds per store


def message(i: int) -> Dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": [{"type": "text", "text": f"message number {i}"}]}


def timed_appends(store: Any, n: int) -> Dict[str, float]:
    early: List[float] = []
    late: List[float] = []
    late_start = n - WINDOW
    messages = [message(i) for i in range(n)]
    clock = time.perf_counter
    started = clock()
    for i, m in enumerate(messages):
        if WINDOW <= i < 2 * WINDOW or i >= late_start:
            t0 = clock()
            store.append(m)
            (early if i < late_start else late).append(clock() - t0)
        else:
            store.append(m)
    total = clock() - started
    return {"appends_per_s": n / total, "early_us": statistics.median(early) * 1e6,
            "late_us": statistics.median(late) * 1e6}


def best_load(make: Callable[[], Any], n: int) -> float:
    loads = []
    for _ in range(3):
        fresh = make()  # a new Agent's store: nothing cached
        t0 = time.perf_counter()
        loaded = fresh.load()
        loads.append(time.perf_counter() - t0)
        assert len(loaded) == n, len(loaded)
        fresh.close()
    return min(loads)


def lock_cost_us(store: Any) -> float:
    with store.lock():
        pass  # warm: connections, files, tables
    t0 = time.perf_counter()
    for _ in range(LOCKS):
        with store.lock():
            pass
    return (time.perf_counter() - t0) / LOCKS * 1e6


# -- 1 and 2: files --------------------------------------------------------------------


def file_stores(tmp: str, n: int, fsync_n: int) -> Dict[str, Any]:
    print(f"\n1. {n:,} appends per store; medians of single appends around #{WINDOW} and "
          f"#{n - WINDOW // 2:,}")
    print(f"{'store':<14}{'appends/s':>11}{'early µs':>10}{'late µs':>9}{'late/early':>11}"
          f"{'load s':>8}")
    made: Dict[str, Any] = {}
    for name, fsync, count in (("jsonl", False, n), ("sqlite", False, n),
                               ("jsonl fsync", True, fsync_n), ("sqlite fsync", True, fsync_n)):
        if fsync and name == "jsonl fsync":
            print(f"\n2. with fsync=True, {fsync_n:,} appends")
        base = name.split()[0]
        path = os.path.join(tmp, f"{name.replace(' ', '-')}.{'jsonl' if base == 'jsonl' else 'db'}")

        def make(path: str = path, base: str = base, fsync: bool = fsync) -> Any:
            if base == "jsonl":
                return JsonlHistoryStore(path, fsync=fsync)
            return SqliteHistoryStore(path, "bench", fsync=fsync)

        store = make()
        r = timed_appends(store, count)
        load_s = best_load(make, count)
        made[name] = store
        print(f"{name:<14}{r['appends_per_s']:>11,.0f}{r['early_us']:>10.1f}{r['late_us']:>9.1f}"
              f"{r['late_us'] / r['early_us']:>11.2f}{load_s:>8.3f}")
    floor = fsync_floor(os.path.join(tmp, "floor.bin"), fsync_n)
    print(f"{'os.fsync floor':<14}{floor:>11,.0f}   (os.write + os.fsync per line, same disk)")
    return made


def fsync_floor(path: str, n: int) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    line = encode_message(message(0)) + b"\n"
    t0 = time.perf_counter()
    for _ in range(n):
        os.write(fd, line)
        os.fsync(fd)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    return n / elapsed


# -- 3: PostgreSQL -----------------------------------------------------------------------


ROUNDS = DEFAULT_ROUNDS  # the store and the floor take turns: a busy moment hits both


def postgres(n: int, fsync: bool) -> Dict[str, Any]:
    from lattice.testing.postgres import PostgresUnavailable, TemporaryPostgres

    drivers = [d for d in ("psycopg", "pg8000") if _installed(d)]
    if not drivers:
        print("\n3. PostgreSQL: skipped (neither psycopg nor pg8000 is installed)")
        return {}
    server = TemporaryPostgres(fsync=fsync)
    try:
        server.start()
    except PostgresUnavailable as exc:
        print(f"\n3. PostgreSQL: skipped ({exc})")
        return {}
    print(f"\n3. PostgreSQL, {n:,} appends over a Unix socket (server fsync "
          f"{'on' if fsync else 'off'}), in {ROUNDS} rounds taking turns with the floor: a "
          "plain INSERT loop (json.dumps + execute) on one connection with the same driver; "
          "load: SELECT + json.loads. Rates and load times are medians of the rounds; a "
          "ratio is the median of the ratios within a round (min-max).")
    print(f"{'driver':<10}{'store/s':>10}{'floor/s':>10}{'append ratio':>24}{'load s':>9}"
          f"{'floor s':>9}{'load ratio':>24}")
    stores: Dict[str, Any] = {}
    worst = 0.0
    try:
        for driver in drivers:
            store = PostgresHistoryStore(server.conninfo, f"bench-{driver}", driver=driver)
            floor = PlainLoop(server.conninfo, driver)
            store.append(message(0))  # creates the table; the run starts on a warm connection
            store.delete()
            messages = [message(i) for i in range(n)]
            per_round = n // ROUNDS
            rates: Dict[str, List[float]] = {"store": [], "floor": []}
            for r in range(ROUNDS):
                chunk = messages[r * per_round:(r + 1) * per_round]
                rates["store"].append(rate(store.append, chunk))
                rates["floor"].append(rate(floor.append, chunk))
            loads: Dict[str, List[float]] = {"store": [], "floor": []}
            for _ in range(ROUNDS):
                fresh = PostgresHistoryStore(server.conninfo, f"bench-{driver}", driver=driver)
                loads["store"].append(timed(fresh.load, per_round * ROUNDS))
                loads["floor"].append(timed(floor.load, per_round * ROUNDS))
            floor.close()
            ours, base = Spread(rates["store"]), Spread(rates["floor"])
            load_s, floor_s = Spread(loads["store"]), Spread(loads["floor"])
            appends = Spread([f / r for r, f in zip(rates["store"], rates["floor"])])
            loading = Spread([m / f for m, f in zip(loads["store"], loads["floor"])])
            print(f"{driver:<10}{ours.median:>10,.0f}{base.median:>10,.0f}{appends.text():>24}"
                  f"{load_s.median:>9.3f}{floor_s.median:>9.3f}{loading.text():>24}")
            worst = max(worst, appends.median, loading.median)
            stores[f"postgres {driver}"] = (store, server)
    except BaseException:
        server.stop()
        raise
    verdict = verdict_text(worst <= 1.3 if ROUNDS >= MIN_ROUNDS else None)
    print(f"worst median ratio to the floor: {worst:.2f} (target <= 1.3): {verdict}")
    return stores


def rate(append: Callable[[Any], Any], chunk: List[Dict[str, Any]]) -> float:
    t0 = time.perf_counter()
    for m in chunk:
        append(m)
    return len(chunk) / (time.perf_counter() - t0)


def timed(load: Callable[[], List[Any]], expected: int) -> float:
    t0 = time.perf_counter()
    loaded = load()
    elapsed = time.perf_counter() - t0
    assert len(loaded) == expected, (len(loaded), expected)
    return elapsed


class PlainLoop:
    """The floor: what a hand-written loop over the same driver does, on one connection,
    into a table like the store's."""

    def __init__(self, conninfo: str, driver: str) -> None:
        if driver == "psycopg":
            import psycopg

            self.conn: Any = psycopg.connect(conninfo, autocommit=True)
        else:
            import pg8000.dbapi

            from lattice.stores.pg_conninfo import parse_conninfo, pg8000_arguments

            self.conn = pg8000.dbapi.connect(**pg8000_arguments(parse_conninfo(conninfo)))
            self.conn.autocommit = True
        self.cur = self.conn.cursor()
        self.table = f"floor_{driver}"
        self.cur.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.cur.execute(f"CREATE TABLE {self.table} (id BIGSERIAL PRIMARY KEY, "
                         "session_id TEXT NOT NULL, message TEXT NOT NULL)")
        self.cur.execute(f"CREATE INDEX ON {self.table} (session_id, id)")
        self.insert = f"INSERT INTO {self.table} (session_id, message) VALUES (%s, %s)"
        self.select = f"SELECT message FROM {self.table} WHERE session_id = %s ORDER BY id"

    def append(self, m: Dict[str, Any]) -> None:
        self.cur.execute(self.insert, ("floor", json.dumps(m)))

    def load(self) -> List[Any]:
        self.cur.execute(self.select, ("floor",))
        return [json.loads(text) for (text,) in self.cur.fetchall()]

    def close(self) -> None:
        self.cur.execute(f"DROP TABLE {self.table}")
        self.conn.close()


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# -- 4: locks -----------------------------------------------------------------------------


def locks(tmp: str, stores: Dict[str, Any]) -> None:
    print(f"\n4. session lock: acquire + release per query (mean of {LOCKS})")
    everyone: Dict[str, Any] = {"memory": MemoryHistoryStore(),
                                "jsonl": JsonlHistoryStore(os.path.join(tmp, "lock.jsonl")),
                                "sqlite": SqliteHistoryStore(os.path.join(tmp, "lock.db"), "l")}
    for name, value in stores.items():
        if name.startswith("postgres"):
            everyone[name] = value[0]
    for name, store in everyone.items():
        print(f"{name:<18}{lock_cost_us(store):>9.1f} µs")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages instead")
    parser.add_argument("-n", type=int, default=None, help="messages per store")
    parser.add_argument("--fsync-n", type=int, default=2000, help="appends with fsync on")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--pg-fsync", action="store_true",
                        help="run the PostgreSQL server with fsync and synchronous_commit on")
    args = parser.parse_args(argv)
    n = args.n or (10_000 if args.quick else 100_000)
    if n < 3 * WINDOW or args.fsync_n < 3 * WINDOW:
        parser.error(f"-n and --fsync-n must be at least {3 * WINDOW}")
    with tempfile.TemporaryDirectory() as tmp:
        files = file_stores(tmp, n, args.fsync_n)
        pg = {} if args.no_postgres else postgres(n, args.pg_fsync)
        try:
            locks(tmp, pg)
        finally:
            for value in pg.values():
                value[1].stop()
        for store in files.values():
            store.close()


if __name__ == "__main__":
    main()
