"""Durable runs: what a run id costs, and what fencing costs per append.

    python bench/durable_bench.py              # 12 rounds
    python bench/durable_bench.py --rounds 30
    python bench/durable_bench.py --no-postgres

1. A 20-turn tool run (20 tool calls, then an answer) through the built-in Anthropic client
   against the local ``MockMessagesServer`` (a real HTTP round trip per model request), with
   ``run_id=`` and without, on the same store kind, in alternating rounds (so a busy moment
   on a shared machine hits both). With a run id the store also writes the run record at
   the start and the end, and one journal entry per tool call. Target (SQLite and
   PostgreSQL): the run-id run within 1.15x of the plain one: the median of the ratios
   within a round, printed with its min-max (no verdict from fewer than 5 rounds).
2. The same runs with a model that answers in-process (``FunctionModelClient``): no
   network, so the ratio is the store writes' share alone, and what the run id adds per
   turn in microseconds. Target (#39): SQLite <= +50 us a turn (median of the rounds'
   differences), the stores sharing their connections as a server's do (``stores``); a
   new store each run (new connections: each prepares its statements again) is shown
   beside it. ``instructions.py --this`` counts the same in instructions. 101 rounds
   by default: a run takes a few milliseconds, and SQLite's checkpoints (an fsync every
   ~1000 pages written) land in one round of several, so a few rounds give a median the
   next run does not repeat.
3. The fencing check per append: ``append`` while holding the session lock (the write
   carries the token and the store checks it in the same transaction / statement) against
   ``append`` without the lock (no check), per store, in microseconds (shown: the median
   of the rounds' differences).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _rounds import Spread, judge, verdict_text  # noqa: E402

from lattice import Agent, AnthropicClient, SqliteHistoryStore, tool  # noqa: E402
from lattice.stores import JsonlHistoryStore, PostgresHistoryStore  # noqa: E402
from lattice.testing import FunctionModelClient, MockMessagesServer  # noqa: E402

TURNS = 20
TARGET = 1.15
PER_TURN_US = 50  # a durable SQLite run over a plain one, in-process (#39)


@tool
def step(n: int) -> str:
    """Do one step."""
    return f"step {n} done"


def reply_for(messages: List[Any]) -> Any:
    """Twenty tool turns, then the answer."""
    done = sum(1 for m in messages if m["role"] == "assistant")
    if done < TURNS:
        return {"content": [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}",
                             "name": "step", "input": {"n": done}}],
                "usage": {"input_tokens": 100, "output_tokens": 10}}
    return {"content": [{"type": "text", "text": "all done"}],
            "usage": {"input_tokens": 100, "output_tokens": 5}}


class MockScript:
    """Serves ``reply_for`` to the mock server's requests (any number of runs)."""

    def __init__(self) -> None:
        self.server = MockMessagesServer([self.reply], repeat=True, record=False)

    def reply(self, request: Dict[str, Any]) -> Any:
        return reply_for(request["messages"])


def one_run(make_store: Callable[[str], Any], client: Any, run_id: bool) -> float:
    session = f"s-{uuid.uuid4().hex[:12]}"
    agent = Agent(model="claude-mock-1", model_client=client, tools=[step],
                  history_store=make_store(session), max_turns=TURNS + 5)
    started = time.perf_counter()
    result = agent.prompt("Do the twenty steps.", run_id=session if run_id else None)
    took = time.perf_counter() - started
    assert result.subtype == "success" and result.num_turns == TURNS + 1, result
    return took


def paired(make_store: Callable[[str], Any], client: Any, rounds: int
           ) -> Tuple[Spread, Spread, Spread]:
    """Seconds of a run without and with a run id, in alternating rounds, and the ratio
    within each round (with / without)."""
    plain: List[float] = []
    durable: List[float] = []
    one_run(make_store, client, True)  # warm: tables, connections, imports
    one_run(make_store, client, False)
    for i in range(rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        for with_id in order:
            (durable if with_id else plain).append(one_run(make_store, client, with_id))
    return Spread(plain), Spread(durable), Spread([d / p for p, d in zip(plain, durable)])


def fence_cost_us(make_store: Callable[[str], Any], n: int, rounds: int
                  ) -> Tuple[Spread, Spread, Spread]:
    """Microseconds per append (``n`` a round) without the lock and while holding it, in
    interleaved rounds, and the difference within each round."""
    message = {"role": "user", "content": [{"type": "text", "text": "x" * 200}]}
    free: List[float] = []
    held: List[float] = []
    for i in range(rounds):
        store = make_store(f"f-{uuid.uuid4().hex[:12]}")
        store.append(message)  # table, connection
        lock = store.lock()
        for locked in ((False, True) if i % 2 == 0 else (True, False)):
            if locked:
                lock.__enter__()
            started = time.perf_counter()
            for _ in range(n):
                store.append(message)
            (held if locked else free).append((time.perf_counter() - started) / n * 1e6)
            if locked:
                lock.__exit__(None, None, None)
    return Spread(free), Spread(held), Spread([h - f for f, h in zip(free, held)])


def stores(tmp: str, postgres: bool) -> Tuple[Dict[str, Callable[[str], Any]], Any]:
    """How each run gets its store: as a server does (docs/history-stores.md,
    examples/wsgi_app.py), one store per database and ``with_session`` for each
    conversation, so runs share its connections (and SQLite's prepared statements)."""
    sqlite_root = SqliteHistoryStore(os.path.join(tmp, "runs.db"), "-")
    made: Dict[str, Callable[[str], Any]] = {
        "jsonl": lambda s: JsonlHistoryStore(os.path.join(tmp, f"{s}.jsonl")),
        "sqlite": sqlite_root.with_session,
    }
    server = None
    if postgres:
        from lattice.testing.postgres import PostgresUnavailable, TemporaryPostgres

        server = TemporaryPostgres()
        try:
            server.start()
        except PostgresUnavailable as exc:
            print(f"(no PostgreSQL: {exc})")
            server = None
        else:
            made["postgres"] = PostgresHistoryStore(server.conninfo, "-").with_session
    return made, server


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12,
                        help="alternating rounds (at least 5 for a verdict)")
    parser.add_argument("--local-rounds", type=int, default=101,
                        help="alternating rounds of part 2 (a run takes a few ms)")
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    passed = True
    with tempfile.TemporaryDirectory() as tmp:
        made, server = stores(tmp, not args.no_postgres)
        try:
            script = MockScript()
            with script.server as mock:
                http = AnthropicClient(api_key="mock", base_url=mock.base_url)
                print(f"1. a {TURNS}-turn tool run over HTTP (mock server), medians of "
                      f"{args.rounds} rounds: without run_id, with, and with / without "
                      "within a round (min-max)")
                for name, make in made.items():
                    plain, durable, ratio = paired(make, http, args.rounds)
                    target = name != "jsonl"
                    ok = judge(ratio, lambda v: v <= TARGET) if target else None
                    passed = passed and ok is not False
                    print(f"   {name:9} {plain.median * 1000:8.1f} ms  "
                          f"{durable.median * 1000:8.1f} ms  {ratio.text()}  "
                          f"{verdict_text(ok)} (<= {TARGET}x)")
            local = FunctionModelClient(lambda request: reply_for(request.messages))
            print("2. the same with an in-process model (the store writes' share): without / "
                  f"with, and what the run id adds per turn ({TURNS + 1} model calls)")
            fresh = {"sqlite, a new store each run":
                     lambda s: SqliteHistoryStore(os.path.join(tmp, "runs.db"), s)}
            for name, make in {**made, **fresh}.items():
                plain, durable, ratio = paired(make, local, args.local_rounds)
                extra = Spread([(d - p) / (TURNS + 1) * 1e6
                                for p, d in zip(plain.values, durable.values)])
                ok = judge(extra, lambda v: v <= PER_TURN_US) if name == "sqlite" else None
                passed = passed and ok is not False
                print(f"   {name:9} {plain.median * 1000:8.1f} ms  "
                      f"{durable.median * 1000:8.1f} ms  {ratio.text()}  "
                      f"+{extra.text('.0f')} us a turn  "
                      f"{verdict_text(ok)}{f' (<= +{PER_TURN_US} us)' if ok is not None else ''}")
            print("3. append without the lock / holding it (the fencing check), per append, "
                  f"medians of {args.rounds} rounds, and the difference within a round")
            for name, make in made.items():
                free, held, extra = fence_cost_us(make, args.appends, args.rounds)
                print(f"   {name:9} {free.median:8.1f} us  {held.median:8.1f} us  "
                      f"+{extra.text('.1f')} us")
        finally:
            if server is not None:
                server.stop()
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
