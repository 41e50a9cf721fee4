"""Per-turn overhead of the agent loop, with no model and trivial tools.

A 50-turn and a 500-turn tool loop against ``FunctionModelClient``: microseconds per turn
(median of several runs), and the ratio 500/50 (per-turn cost must not grow with history).
Both ``prompt()`` and iterating ``query()`` are measured, and the cost of one thread
handoff round trip in the same run (the floor of ``query()``'s lockstep). Last, the
50-turn ``prompt()`` loop with tracing off and on (the OpenTelemetry SDK with a span
processor and an exporter that drops everything), when the SDK is installed.

Every figure is printed as median (min-max) over interleaved rounds (7 by default); a
verdict needs at least 5. Judged on the wall clock: < 100 us/turn for ``prompt()``. The
ratios are shown on the wall clock and judged in instructions (``instructions.py --this``,
valgrind, which the load of a shared machine does not move; #39): ``query()`` <= 1.1x
``prompt()`` per tool turn with a client that can be aborted from another thread
(``abortable``: no hand-off for the model call), per-turn cost at 500 turns <= 1.5x that
at 50 for both, and a 1-turn ``prompt()`` on a 10,000-message conversation <= 1.5x one on
an empty conversation (a new query must not walk the whole history).
Beside them: one thread hand-off round trip on the doorbells ``race.py`` uses
(``lattice.query.handoff``: an eventfd on Linux, else a pipe or a raw lock), with the CPUs the
two threads were seen on, and again with both pinned to one CPU in a child process (on a
VM whose idle cores are slow to wake the two differ tenfold); a ``Condition`` over an
``RLock`` and a ``SimpleQueue`` pair to compare. ``query()`` with a client that keeps the
worker makes two per tool turn (the reply, the tool results); with an abortable one, one
(for the batch) when the query has an abort signal, none when it has not.
Against 0.1 (issue 12: its figures or better; issue 18: tracing off unchanged), see
``compare_versions.py``, which runs both trees in alternating processes.

    python bench/loop_overhead.py [--repeat 7] [--no-instructions]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, judge, verdict_text  # noqa: E402

from lattice import Agent, tool  # noqa: E402
from lattice.testing import FunctionModelClient  # noqa: E402


@tool
def step(n: int) -> str:
    """Advance one step."""
    return f"step {n} done"


def make_agent(turns: int, **options) -> Agent:
    def fn(request):
        n = (len(request.messages) + 1) // 2
        if n >= turns:
            return {"content": [{"type": "text", "text": "finished"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 10, "output_tokens": 2}}
        return {"content": [{"type": "tool_use", "id": f"toolu_{n}", "name": "step",
                             "input": {"n": n}}], "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 2}}

    return Agent(model="bench", model_client=FunctionModelClient(fn, record=False),
                 tools=[step], max_turns=turns + 1, **options)


def per_turn_us(turns: int, mode: str, **options) -> float:
    agent = make_agent(turns, **options)
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


def one_turn_query_us(history: int, queries: int = 200) -> float:
    """A 1-turn ``prompt()`` (the model answers at once) on an Agent whose conversation
    already holds ``history`` messages: microseconds per query (median of 5 batches)."""
    def answer(request):
        return {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 2}}

    agent = Agent(model="bench", model_client=FunctionModelClient(answer, record=False))
    seeded = []
    for i in range(history // 2):
        seeded.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": "earlier"}]
            if i else f"question {i}"})
        seeded.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{i + 1}", "name": "step", "input": {"n": i}}]})
    seeded.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"t{history // 2}", "content": "last"}]})
    agent.replace_history(seeded)
    agent.prompt("warm")
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(queries // 5):
            agent.prompt("next")
        batches.append((time.perf_counter() - t0) / (queries // 5) * 1e6)
    return statistics.median(batches)


def queue_round_trip_us(n: int = 20_000) -> float:
    """One thread handoff there and back on a pair of ``SimpleQueue``s."""
    import queue
    import threading

    there: Any = queue.SimpleQueue()
    back: Any = queue.SimpleQueue()

    def other() -> None:
        for _ in range(n):
            back.put(there.get())

    thread = threading.Thread(target=other)
    thread.start()
    t0 = time.perf_counter()
    for i in range(n):
        there.put(i)
        back.get()
    elapsed = time.perf_counter() - t0
    thread.join()
    return elapsed / n * 1e6


def doorbell_round_trip_us(n: int = 20_000) -> float:
    """The floor for query(): one thread handoff there and back on a pair of the doorbells
    ``QueryRun`` sleeps on in lockstep (``lattice.query.handoff.fast_doorbell``)."""
    import threading

    from lattice.query.handoff import fast_doorbell

    there, back = fast_doorbell(), fast_doorbell()

    def other() -> None:
        for _ in range(n):
            there.wait()
            back.ring()

    thread = threading.Thread(target=other)
    thread.start()
    t0 = time.perf_counter()
    for _ in range(n):
        there.ring()
        back.wait()
    elapsed = time.perf_counter() - t0
    thread.join()
    return elapsed / n * 1e6


def condition_round_trip_us(n: int = 20_000) -> float:
    """One thread handoff there and back on a Condition over an RLock (what ``QueryRun``
    slept on before the doorbells)."""
    import threading

    cond = threading.Condition(threading.RLock())
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


def drop_all_provider():
    """An SDK TracerProvider whose exporter drops every span (SimpleSpanProcessor: the
    export runs in the traced thread, the worst case)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult as Result

    class DropAll(SpanExporter):
        def export(self, spans):
            return Result.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DropAll()))
    return provider


def observer_turn_us(turns: int = 2000) -> float:
    """What the observer calls of one tool turn cost alone (a chat and a tool span)."""
    from types import SimpleNamespace

    from lattice.models.base import ModelRequest
    from lattice.observe.tracing import OtelObserver

    observer = OtelObserver(tracer_provider=drop_all_provider())
    request = ModelRequest(model="bench", messages=[])
    reply = {"content": [], "model": "bench", "provider_response_id": "msg_1",
             "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 2}}
    call = SimpleNamespace(id="toolu_1", name="step", input={"n": 1})
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
    query = observer.query_start("bench", "go")
    t0 = time.perf_counter()
    for _ in range(turns):
        observer.model_end(observer.model_start(query, request), reply, None)
        observer.tool_end(observer.tool_start(query, call), result, None)
    elapsed = time.perf_counter() - t0
    observer.query_end(query, None, None)
    return elapsed / turns * 1e6


def tracing_options():
    """Agent options that trace every query into an SDK provider whose exporter drops
    everything, and how they were applied; None and why not when that cannot be done."""
    try:
        from opentelemetry import trace
        provider = drop_all_provider()
    except ImportError:
        return None, "opentelemetry-sdk is not installed (pip install -e '.[test]')"
    from lattice.observe.tracing import OtelObserver

    candidates = [("observers=[OtelObserver(...)]",
                   {"observers": [OtelObserver(tracer_provider=provider)]}),
                  ("tracing=True", {"tracing": True})]
    for how, options in candidates:
        try:
            make_agent(1, **options)
        except (TypeError, ValueError):
            continue  # this Agent does not take the option (yet)
        if how == "tracing=True":
            trace.set_tracer_provider(provider)  # what tracing=True reports to
        return options, how
    return None, "this Agent takes neither observers= nor tracing=True yet"


def tracing_report(repeat: int) -> None:
    options, how = tracing_options()
    if options is None:
        print(f"tracing on vs off: skipped: {how}")
        if "not installed" not in how:
            print(f"  (the observer calls of one tool turn alone, SDK, no-op exporter: "
                  f"{observer_turn_us():.1f} us/turn)")
        return
    figures = {}
    for name, extra in (("off", {}), ("on", options)):
        per_turn_us(50, "prompt", **extra)  # warm-up
        figures[name] = statistics.median(per_turn_us(50, "prompt", **extra)
                                          for _ in range(repeat))
    print(f"tracing off {figures['off']:>8.1f} us/turn; on ({how}, SDK, no-op exporter) "
          f"{figures['on']:>8.1f} us/turn: +{figures['on'] - figures['off']:.1f} us/turn "
          f"for a chat and a tool span, ratio {figures['on'] / figures['off']:.2f}")


def this_cpu() -> int:
    """The CPU the calling thread last ran on (Linux), or -1."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def where_round_trip(n: int = 20_000) -> Tuple[float, Set[int], Set[int]]:
    """``doorbell_round_trip_us`` and the CPUs each of the two threads was seen on."""
    import threading

    from lattice.query.handoff import fast_doorbell

    there, back = fast_doorbell(), fast_doorbell()
    seen: Tuple[Set[int], Set[int]] = (set(), set())

    def other() -> None:
        for i in range(n):
            there.wait()
            if i % 500 == 0:
                seen[1].add(this_cpu())
            back.ring()

    thread = threading.Thread(target=other)
    thread.start()
    t0 = time.perf_counter()
    for i in range(n):
        if i % 500 == 0:
            seen[0].add(this_cpu())
        there.ring()
        back.wait()
    elapsed = time.perf_counter() - t0
    thread.join()
    return elapsed / n * 1e6, seen[0], seen[1]


def pinned_round_trip() -> Optional[float]:
    """The round trip with both threads on CPU 0 (a child process pins itself: the
    library never changes a thread's affinity), or None where that cannot be done."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    out = subprocess.run([sys.executable, __file__, "--pinned-round-trip"],
                         capture_output=True, text=True, check=False)
    try:
        return float(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def spread(values: List[float]) -> str:
    return Spread(values).text(".1f")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds (at least {MIN_ROUNDS} for a verdict)")
    parser.add_argument("--no-instructions", action="store_true",
                        help="skip the verdicts counted with valgrind (~4 min on 2 cores)")
    parser.add_argument("--pinned-round-trip", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pinned_round_trip:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        print(doorbell_round_trip_us())
        return 0
    print(f"wall clock, {args.repeat} interleaved rounds: median (min-max)")
    print(f"{'mode':8} {'turns':>6} {'us/turn':>30}")
    figures: Dict[str, Dict[int, List[float]]] = {"prompt": {}, "query": {}}
    for turns in (50, 500):
        for mode in ("prompt", "query"):  # interleaved: a busy moment hits both
            per_turn_us(turns, mode)  # warm-up
        runs: Dict[str, List[float]] = {"prompt": [], "query": []}
        for rep in range(args.repeat):
            for mode in (("prompt", "query") if rep % 2 == 0 else ("query", "prompt")):
                runs[mode].append(per_turn_us(turns, mode))
        for mode in ("prompt", "query"):
            figures[mode][turns] = runs[mode]
            print(f"{mode:8} {turns:>6} {spread(runs[mode]):>30}")
    prompt50 = Spread(figures["prompt"][50])
    checks = [(f"prompt() {prompt50.text('.1f')} us/turn at 50 turns (target < 100, wall "
               "clock)", judge(prompt50, lambda v: v < 100))]
    shown = []
    for mode in ("prompt", "query"):
        growth = Spread([b / a for a, b in zip(figures[mode][50], figures[mode][500])])
        shown.append(f"{mode}() 500/50 per-turn ratio {growth.text()}")
    short = [one_turn_query_us(0, 40) for _ in range(args.repeat)]
    long = [one_turn_query_us(10_000, 40) for _ in range(args.repeat)]
    shown.append(f"1-turn prompt() at 10,000 messages / at 0 "
                 f"{Spread([b / a for a, b in zip(short, long)]).text()} "
                 f"({spread(long)} / {spread(short)} us)")
    ratio = Spread([q / p for p, q in zip(figures["prompt"][50], figures["query"][50])])
    shown.append(f"query()/prompt() per tool turn at 50 turns {ratio.text()}")
    from lattice.query.handoff import fast_doorbell

    bell = fast_doorbell()
    kind = (("eventfd" if getattr(bell, "use_eventfd", False) else "pipe")
            if type(bell).__name__ == "FdDoorbell" else "lock")
    trip, mine, theirs = where_round_trip()
    pinned = pinned_round_trip()
    cond, queue = condition_round_trip_us(), queue_round_trip_us()
    pinned_text = f"{pinned:.1f} us" if pinned is not None else "not measured"
    print(f"thread hand-off round trip on race.py's doorbells ({kind}): {trip:.1f} us "
          f"unpinned (the consumer seen on CPUs {sorted(mine)}, the other thread on "
          f"{sorted(theirs)}), {pinned_text} with both on one CPU (a child process pinned "
          f"to it); {cond:.1f} us on Condition(RLock), {queue:.1f} us on SimpleQueue. "
          "query() with a client that keeps the worker makes two per tool turn (the reply, "
          "the tool results: each waits for the consumer, SPEC 5); with one that can be "
          "aborted from another thread (abortable), one with an abort signal (the batch "
          "goes to a thread an abort can leave), none without.")
    for text in shown:
        print(f"{text}: shown (wall clock; judged in instructions)")
    if not args.no_instructions:
        if shutil.which("valgrind") is None:
            print("valgrind is not installed: the ratio verdicts are not given")
        else:
            from instructions import this_rows

            print("instructions (valgrind), this tree:")
            checks += [(f"{name}: {figure:.3f}", ok) for name, figure, ok in this_rows()]
    for text, ok in checks:
        print(f"{text}: {verdict_text(ok)}")
    tracing_report(args.repeat)
    return 0 if all(ok is not False for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
