"""lattice's HTTP tool loop against the fair ``requests`` floor, on a minimal server (#28).

Every row runs against ``_minimal_server`` (a child process that answers from a template
without parsing the body), so the server's cost is small and the ratios hold still on a
shared machine. The floor is ``http_loop.py``'s bare loop: a ``requests.Session``
configured as lattice's (``_floor.py``: ``trust_env = False`` and lattice's connect/read
timeouts) posting the growing body, encoded afresh each turn. A first row shows what the
timeouts cost that floor (the floor without them / with them), for the record.
Runs alternate (order rotated each round, ``_rounds.interleave``); a ratio is the median
over rounds of the ratio within a round.

* **50 turns**, Messages API and Chat Completions, JSON and SSE replies: ``prompt()``
  and ``query()`` time / the floor's. Target <= 1.1.
* **H = 1,000 and 10,000**: the conversation seeded with H history messages
  (``replace_history``, ~270 bytes each: ~3 MB bodies at 10,000), then a few tool turns,
  each figure per turn after the first (a run of N turns minus a run of 1: setup and a
  new client's first request, which encodes everything, left out): the loop's time / the
  floor's (target at 10,000: <= 0.9, the floor re-encodes the whole body each turn and
  lattice does not), and lattice's client CPU per turn (this process's CPU time: the
  server is another process) in the next query of an Agent that already sent the
  history once / one ``json.dumps`` of the same body (target at 10,000: <= 0.2).
* **32 threads**: ``threads_bench.py``'s rows for 32 threads (its own run does 32 and
  128): each thread its own Agent, ``prompt()`` and ``query()``, throughput and CPU per
  turn against the floor's, in at least 7 interleaved rounds.

* **Instructions** (``--instructions``, valgrind): this process's CPU instructions per
  turn of a 20- and a 60-turn loop (the difference / 40), lattice / the floor, both wire
  formats, JSON and SSE. It does not move with the machine's load, as the 50-turn wall
  clock rows do (they swing by 0.3 between runs on a shared VM); it leaves out what a
  thread's wake-up costs (valgrind runs one thread at a time). Target <= 1.1.

Every wall-clock ratio is judged on the median of at least 5 interleaved rounds (7 by
default) and printed with its min-max; with fewer rounds it is shown, not judged.

    python bench/http_floor.py [--reps 7] [--quick] [--instructions]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _floor import SETTINGS  # noqa: E402
from _minimal_server import minimal_server  # noqa: E402
from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, interleave, judge  # noqa: E402
from http_loop import KEY, MODEL, bare_chat_loop, bare_loop, echo  # noqa: E402
from instructions import counted  # noqa: E402
from threads_bench import threads_rows  # noqa: E402

import lattice  # noqa: E402

Row = Tuple[str, float, Optional[bool]]  # name, ratio, verdict (None: shown, not judged)
TOOLS = [{"name": echo.name, "description": echo.description,
          "input_schema": echo.input_schema}]
PROMPT = "Run the steps."


def seeded(h: int) -> List[Dict[str, Any]]:
    """``h`` history messages (an odd number: it ends with tool results), ~270 bytes each."""
    messages: List[Dict[str, Any]] = [{"role": "user", "content": "Earlier work. " * 18}]
    n = 0
    while len(messages) < h:
        pad = f"earlier step {n}: " + "lorem ipsum dolor sit amet " * 7
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": pad},
            {"type": "tool_use", "id": f"toolu_seed_{n}", "name": "echo",
             "input": {"text": f"seed {n}"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_seed_{n}", "content": pad}]})
        n += 1
    return messages[:h] if h % 2 else messages[: h - 1]


def make_client(provider: str, url: str, stream: bool) -> Any:
    if provider == "openai":
        return lattice.OpenAIChatClient(KEY, url + "/v1", stream=stream)
    return lattice.AnthropicClient(KEY, url, stream=stream)


def lattice_run(url: str, turns: int, stream: bool, provider: str, iterate: bool = False,
                history: Any = None) -> None:
    client = make_client(provider, url, stream)
    agent = lattice.Agent(model=MODEL, model_client=client, tools=[echo], max_turns=turns + 1)
    if history:
        agent.replace_history(history)
    if iterate:
        result: Any = None
        for result in agent.query(PROMPT):
            pass
    else:
        result = agent.prompt(PROMPT)
    assert result.subtype == "success" and result.num_turns == turns, result
    client.close()


def bare_run(url: str, turns: int, stream: bool, provider: str,
             history: Any = None) -> None:
    if provider == "openai":
        bare_chat_loop(url, turns, stream, TOOLS)
    else:
        bare_loop(url, turns, stream, TOOLS, history)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def fifty_turn_rows(server: Callable[[int], str], reps: int) -> List[Row]:
    url = server(50)
    rows = []
    for provider in ("anthropic", "openai"):
        for stream in (False, True):
            runs = [lambda: bare_run(url, 50, stream, provider),  # noqa: B023 - run here
                    lambda: lattice_run(url, 50, stream, provider),  # noqa: B023
                    lambda: lattice_run(url, 50, stream, provider, True)]  # noqa: B023
            ratios = interleave(runs, reps).ratios
            name = f"50 turns {provider} {'SSE' if stream else 'JSON'}"
            for slot, mode in ((1, "prompt"), (2, "query")):
                rows.append((f"{name} {mode}()/floor: {ratios[slot].text()}",
                             ratios[slot].median, judge(ratios[slot], lambda v: v <= 1.1)))
    return rows


def timeouts_row(server: Callable[[int], str], reps: int) -> Row:
    """The floor without lattice's timeouts / with them (50 turns, JSON): what a client
    that could hang forever saves. Shown, no target."""
    url = server(50)

    def untimed() -> None:
        SETTINGS["timeouts"] = False
        try:
            bare_run(url, 50, False, "anthropic")
        finally:
            SETTINGS["timeouts"] = True

    ratio = interleave([lambda: bare_run(url, 50, False, "anthropic"), untimed], reps).ratios[1]
    return (f"the floor without timeouts / with them, 50 turns JSON: {ratio.text()}",
            ratio.median, None)


IR_TURNS = (20, 60)  # per turn = the difference / 40: start-up and imports cancel out


def ir_worker(mode: str, turns: int, provider: str, stream: bool) -> None:
    """In the interpreter valgrind measures: one loop (the server is a child process that
    valgrind does not follow)."""
    with minimal_server() as server:
        url = server(turns)
        if mode == "floor":
            bare_run(url, turns, stream, provider)
        else:
            lattice_run(url, turns, stream, provider, mode == "query")


def ir_count(mode: str, turns: int, provider: str, stream: bool) -> int:
    return counted([__file__, "--ir-worker", mode, str(turns), provider,
                    "sse" if stream else "json"])


def instruction_rows() -> List[Row]:
    """This process's CPU instructions per turn (valgrind), lattice / the floor: the
    noise-free companion of the 50-turn rows (valgrind runs one thread at a time, so the
    handoffs' wake-ups are not in it, only their instructions). Target <= 1.1."""
    jobs = [(mode, turns, provider, stream) for provider in ("anthropic", "openai")
            for stream in (False, True) for mode in ("floor", "prompt", "query")
            for turns in IR_TURNS]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores: two valgrinds at a time
        counts = dict(zip(jobs, pool.map(lambda job: ir_count(*job), jobs)))
    rows = []
    span = IR_TURNS[1] - IR_TURNS[0]
    for provider in ("anthropic", "openai"):
        for stream in (False, True):
            per_turn = {mode: (counts[(mode, IR_TURNS[1], provider, stream)] -
                               counts[(mode, IR_TURNS[0], provider, stream)]) / span
                        for mode in ("floor", "prompt", "query")}
            for mode in ("prompt", "query"):
                ratio = per_turn[mode] / per_turn["floor"]
                rows.append((f"instructions per turn {provider} {'SSE' if stream else 'JSON'} "
                             f"{mode}()/floor ({per_turn[mode] / 1e6:.2f}M / "
                             f"{per_turn['floor'] / 1e6:.2f}M)", ratio, ratio <= 1.1))
    return rows


def cpu_of(fn: Callable[[], Any]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def seeded_rows(server: Callable[[int], str], reps: int, sizes: List[int]
                ) -> List[Row]:
    """Per turn after the first (a run of ``turns`` minus a run of one, each with a fresh
    Agent and client): the first request of a new client encodes the whole history, as
    the floor does every turn; the turns after it are what a long conversation costs."""
    rows = []
    for h in sizes:
        history = seeded(h)
        turns = 6 if h >= 10_000 else 11
        assistants = sum(1 for m in history if m["role"] == "assistant")
        runs = []
        for n in (turns, 1):
            runs += [lambda n=n: bare_loop(server(assistants + n), n, False, TOOLS, history),
                     lambda n=n: lattice_run(server(assistants + n), n, False, "anthropic",
                                             history=history)]
        times = interleave(runs, reps).times  # per round: (N turns - 1 turn) loop / floor
        per_round = Spread([(a.values[i] - c.values[i]) / (b.values[i] - d.values[i])
                            for a, b, c, d in [(times[1], times[0], times[3], times[2])]
                            for i in range(reps)])
        loop_ratio = per_round.median
        per_turn = statistics.median(steady_cpu(server, history, turns - 1)
                                     for _ in range(max(MIN_ROUNDS, reps)))
        final = {"model": MODEL, "max_tokens": 8192, "messages": history + [
            {"role": "user", "content": PROMPT}] + seeded(2 * turns + 1)[1:], "tools": TOOLS}
        dumps = statistics.median(cpu_of(lambda: json.dumps(  # noqa: B023 - run here
            final, ensure_ascii=False, separators=(",", ":"))) for _ in range(5))
        target = h >= 10_000
        rows.append((f"H={h:,} loop/floor per turn after the first ({turns - 1} turns, JSON): "
                     f"{per_round.text()}", loop_ratio,
                     judge(per_round, lambda v: v <= 0.9) if target else None))
        rows.append((f"H={h:,} client CPU per turn / json.dumps of the body "
                     f"({per_turn * 1e3:.2f} ms / {dumps * 1e3:.2f} ms)", per_turn / dumps,
                     (per_turn / dumps <= 0.2) if target else None))
    return rows


def steady_cpu(server: Callable[[int], str], history: List[Any], turns: int) -> float:
    """CPU seconds per tool turn of a query on an Agent (and client) that already sent
    the seeded history once: a long conversation's next query."""
    assistants = sum(1 for m in history if m["role"] == "assistant")
    client = make_client("anthropic", server(assistants + 1), False)
    agent = lattice.Agent(model=MODEL, model_client=client, tools=[echo], max_turns=turns + 1)
    agent.replace_history(history)
    assert agent.prompt(PROMPT).num_turns == 1  # the first request: everything encoded
    server(assistants + 1 + turns)
    started = time.process_time()
    result = agent.prompt(PROMPT)
    cpu = time.process_time() - started
    assert result.num_turns == turns, result
    client.close()
    return cpu / turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--quick", action="store_true", help="H = 1,000 only, fewer reps")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per turn with valgrind (~3 min)")
    parser.add_argument("--ir-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ir_worker:
        mode, turns, provider, fmt = args.ir_worker
        ir_worker(mode, int(turns), provider, fmt == "sse")
        return 0
    reps = MIN_ROUNDS if args.quick else args.reps
    sizes = [1_000] if args.quick else [1_000, 10_000]
    rows: List[Row] = []
    with minimal_server() as server:
        rows.append(timeouts_row(server, reps))
        rows += fifty_turn_rows(server, reps)
        rows += seeded_rows(server, reps, sizes)
        for spread_row in threads_rows(server, max(DEFAULT_ROUNDS, reps), 32):
            rows.append((f"{spread_row[0]}: {spread_row[1].text()}", spread_row[1].median,
                         spread_row[2]))
    if args.instructions:
        if shutil.which("valgrind") is None:
            print("valgrind is not installed (apt-get install valgrind): no instruction rows")
        else:
            rows += instruction_rows()
    width = max(len(r[0]) for r in rows)
    for name, ratio, ok in rows:
        print(f"{name:{width}}  {ratio:6.2f}  {'' if ok is None else verdict(ok)}")
    judged = [r for r in rows if r[2] is not None]
    failed = [r[0] for r in judged if not r[2]]
    print(f"\n{len(judged) - len(failed)}/{len(judged)} PASS" +
          (f"; FAIL: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
