"""Per-turn overhead of the agent loop, with no model and trivial tools.

A 50-turn and a 500-turn tool loop against ``FunctionModelClient``: microseconds per turn
(median of several runs), and the ratio 500/50 (per-turn cost must not grow with history).
Both ``prompt()`` and iterating ``query()`` are measured, and the cost of one thread
handoff round trip in the same run (the floor of ``query()``'s lockstep). Last, the
50-turn ``prompt()`` loop with tracing off and on (the OpenTelemetry SDK with a span
processor and an exporter that drops everything), when the SDK is installed.

Targets, each printed with PASS/FAIL (the exit status is 1 if any fails): < 100 us/turn
for ``prompt()``; per-turn cost at 500 turns <= 1.5x that at 50, for both; a 1-turn
``prompt()`` on a 10,000-message conversation <= 1.5x one on an empty conversation (a new
query must not walk the whole history: 0.3 counted its cache marks anew per query); ``query()``
<= 2x ``prompt()`` per tool turn (issue 28). ``query()``'s own floor is ``prompt()`` plus
two thread handoff round trips per tool turn (the reply, then the tool results, each
waits for the consumer), measured here on the primitive ``race.py`` uses (a pair of
``lattice.query.handoff`` doorbells: an eventfd on Linux, else a pipe or a raw lock), and, to
compare, on a ``Condition`` over an ``RLock`` (what it used before) and a ``SimpleQueue``
pair: the line says how far ``query()`` is above its floor. On a VM whose idle cores are
slow to wake, every figure depends on whether the two threads share a core: run it again
under ``taskset -c 0`` to see the one-core figures.
Against 0.1 (issue 12: its figures or better; issue 18: tracing off unchanged), see
``compare_versions.py``, which runs both trees in alternating processes.

    python bench/loop_overhead.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'mode':8} {'turns':>6} {'us/turn (median)':>18}")
    figures: Dict[str, Dict[int, float]] = {"prompt": {}, "query": {}}
    for turns in (50, 500):
        for mode in ("prompt", "query"):  # interleaved: a busy moment hits both
            per_turn_us(turns, mode)  # warm-up
        runs: Dict[str, List[float]] = {"prompt": [], "query": []}
        for _ in range(args.repeat):
            for mode in ("prompt", "query"):
                runs[mode].append(per_turn_us(turns, mode))
        for mode in ("prompt", "query"):
            figures[mode][turns] = statistics.median(runs[mode])
            print(f"{mode:8} {turns:>6} {figures[mode][turns]:>18.1f}")
    checks = [(f"prompt() {figures['prompt'][50]:.1f} us/turn at 50 turns (target < 100)",
               figures["prompt"][50] < 100)]
    for mode in ("prompt", "query"):
        growth = figures[mode][500] / figures[mode][50]
        checks.append((f"{mode}() 500/50 per-turn ratio {growth:.2f} (target <= 1.5)",
                       growth <= 1.5))
    short, long = one_turn_query_us(0), one_turn_query_us(10_000)
    print(f"1-turn prompt() on a conversation of 0 messages {short:.1f} us/query, "
          f"of 10,000 messages {long:.1f} us/query")
    checks.append((f"1-turn query cost at 10,000 messages / at 0: {long / short:.2f} "
                   "(target <= 1.5: a query must not walk the whole history)",
                   long / short <= 1.5))
    ratio = figures["query"][50] / figures["prompt"][50]
    checks.append((f"query()/prompt() per tool turn at 50 turns {ratio:.2f} (target <= 2)",
                   ratio <= 2.0))
    from lattice.query.handoff import fast_doorbell

    bell = fast_doorbell()
    kind = (("eventfd" if getattr(bell, "use_eventfd", False) else "pipe")
            if type(bell).__name__ == "FdDoorbell" else "lock")
    trip = doorbell_round_trip_us()
    cond, queue = condition_round_trip_us(), queue_round_trip_us()
    floor = figures["prompt"][50] + 2 * trip
    print(f"thread handoff round trip here: {trip:.1f} us on race.py's doorbells ({kind}); "
          f"{cond:.1f} us on Condition(RLock) ({cond / trip:.2f}x), {queue:.1f} us on "
          "SimpleQueue. prompt() makes one per query; query() two per tool turn (the "
          "reply, the tool results: each waits for the consumer, SPEC 5), so query()'s "
          f"floor is prompt() + 2 round trips = {floor:.0f} us/turn; query() is "
          f"{figures['query'][50] / floor:.2f}x its floor.")
    for text, ok in checks:
        print(f"{text}: {'PASS' if ok else 'FAIL'}")
    tracing_report(args.repeat)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
