"""Throughput of lattice.schema against jsonschema, jsonschema-rs and fastjsonschema.

Every (schema, instance) pair of the JSON-Schema-Test-Suite's required tests (remote-ref
cases left out) is validated with one compiled validator per schema, for each library, in
the same run. Pairs that any library cannot compile or that raise are left out for all,
so every figure covers the same work.

    python bench/schema_bench.py [--reps 30] [--rounds 7] [--drafts 2020-12 7] [--suite DIR]

None of jsonschema, jsonschema-rs (Rust, PyPI ``jsonschema-rs``) and fastjsonschema is a
dependency of lattice; missing ones are skipped. Formats are annotations for every library
(lattice's default), so all of them do the same work.

Targets, as ratios of validations/s in this run: lattice >= 5x jsonschema on 2020-12, and
>= 0.5x fastjsonschema on draft 7, on all pairs and on the valid instances alone (issue
28: fastjsonschema raises on invalid ones, which is slow, so a lead over it on all pairs
comes mostly from those); each printed PASS/FAIL, exit status 1 if any fails.

The libraries take turns in ``--rounds`` interleaved rounds (7 by default, the order rotated
each round; ``_rounds``), a round timing one sweep of ``--reps`` passes over the pairs per
library, so a busy moment on a shared machine hits them all. Rates are medians over rounds
with their min-max; a ratio is taken within each round and its median judged, printed with
its min-max. With fewer than 5 rounds the ratios are shown, not judged (#39).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from _rounds import DEFAULT_ROUNDS, MIN_ROUNDS, Spread, interleave, judge, verdict_text  # noqa: E402
from suite_adapter import needs_remote  # noqa: E402

from lattice import schema  # noqa: E402

# ../shared beside the repository; LATTICE_SHARED overrides it (as for tests/conftest.py).
SHARED = Path(os.environ.get("LATTICE_SHARED") or ROOT.parent / "shared")
DEFAULT_SUITE = SHARED / "data/JSON-Schema-Test-Suite"
DRAFT_DIRS = {"2020-12": "draft2020-12", "7": "draft7"}
TARGETS = {"2020-12": ("jsonschema", 5.0), "7": ("fastjsonschema", 0.5)}

Factory = Callable[[Any], Callable[[Any], bool]]


def load_cases(suite: Path, draft: str) -> list[dict[str, Any]]:
    root = suite / "tests" / DRAFT_DIRS[draft]
    cases = []
    for path in sorted(root.glob("*.json")):
        if path.name == "refRemote.json":
            continue
        for case in json.loads(path.read_text(encoding="utf-8")):
            if not needs_remote(case["schema"], draft):
                cases.append(case)
    return cases


def factories(draft: str) -> dict[str, Factory]:
    found: dict[str, Factory] = {
        "lattice": lambda s: schema.compile(s, draft=draft).is_valid,
    }
    try:
        import jsonschema
    except ImportError:
        pass
    else:
        cls = jsonschema.Draft202012Validator if draft == "2020-12" else jsonschema.Draft7Validator
        found["jsonschema"] = lambda s: cls(s).is_valid
    try:
        import jsonschema_rs
    except ImportError:
        pass
    else:
        rs_cls = (jsonschema_rs.Draft202012Validator if draft == "2020-12"
                  else jsonschema_rs.Draft7Validator)
        # Draft 7 asserts formats by default in jsonschema-rs; offline: no fetching.
        found["jsonschema-rs"] = lambda s: rs_cls(s, validate_formats=False, offline=True).is_valid
    if draft == "7":  # fastjsonschema implements drafts 4, 6 and 7 only
        try:
            import fastjsonschema
        except ImportError:
            pass
        else:

            def build(s: Any) -> Callable[[Any], bool]:
                # No default-filling: it would write into the shared instances. (Its other
                # switches, use_formats and detailed_exceptions, break many schemas in 2.22.)
                check = fastjsonschema.compile(s, use_default=False)
                error = fastjsonschema.JsonSchemaException

                def is_valid(instance: Any) -> bool:
                    try:
                        check(instance)
                    except error:
                        return False
                    return True

                return is_valid

            found["fastjsonschema"] = build
    return found


def prepare(
    cases: list[dict[str, Any]], impls: dict[str, Factory]
) -> tuple[dict[str, list[Any]], int]:
    """Per library, a list of (validate, instance) pairs; only pairs every library handles."""
    calls: dict[str, list[Any]] = {name: [] for name in impls}
    dropped = 0
    for case in cases:
        built: dict[str, Optional[Callable[[Any], bool]]] = {}
        for name, factory in impls.items():
            try:
                built[name] = factory(json.loads(json.dumps(case["schema"])))
            except Exception:  # noqa: BLE001 - a library that cannot compile this schema
                built[name] = None
        for test in case["tests"]:
            ok = True
            for fn in built.values():
                try:
                    ok = ok and fn is not None and isinstance(fn(test["data"]), bool)
                except Exception:  # noqa: BLE001
                    ok = False
            if not ok:
                dropped += 1
                continue
            for name, fn in built.items():
                calls[name].append((fn, test["data"], test["valid"]))
    return calls, dropped


def sweep(pairs: list[Any], reps: int) -> None:
    for _ in range(reps):
        for fn, instance, _ in pairs:
            fn(instance)


def run(suite: Path, draft: str, reps: int, rounds: int) -> bool:
    cases = load_cases(suite, draft)
    impls = factories(draft)
    calls, dropped = prepare(cases, impls)
    n = len(calls["lattice"])
    print(
        f"draft {draft}: {len(cases)} schemas, {n} (schema, instance) pairs timed, "
        f"{dropped} left out (some library could not compile or run them); {reps} reps a "
        f"sweep, {rounds} interleaved rounds: median (min-max)"
    )
    plain = [
        (lambda x, s=c["schema"]: schema.is_valid(x, s, draft=draft), t["data"], t["valid"])
        for c in cases
        for t in c["tests"]
    ]
    # Every library on all pairs and on the valid ones, and lattice's plain call: each a
    # contender, timed in the same rounds (after one warm sweep each: plain's compiles).
    sets = {(name, whole): pairs if whole else [p for p in pairs if p[2]]
            for name, pairs in calls.items() for whole in (True, False)}
    sets[("lattice (plain)", True)] = plain
    times = interleave([lambda p=pairs: sweep(p, reps) for pairs in sets.values()], rounds).times
    rates = {key: [len(sets[key]) * reps / t for t in spread.values]
             for key, spread in zip(sets, times)}

    def ratio(other: str, whole: bool) -> Spread:  # lattice / other, within each round
        return Spread([a / b for a, b in zip(rates["lattice", whole], rates[other, whole])])

    for name, pairs in calls.items():
        correct = sum(fn(instance) == valid for fn, instance, valid in pairs)
        print(f"  {name:<15} {Spread(rates[name, True]).text(',.0f')} validations/s   "
              f"({correct}/{n} as the suite expects); valid instances only: "
              f"{Spread(rates[name, False]).text(',.0f')}/s")
    print(f"  {'lattice (plain)':<15} {Spread(rates['lattice (plain)', True]).text(',.0f')} "
          "validations/s   (schema.is_valid(instance, schema) per call, cache lookup included)")
    for other in calls:
        if other != "lattice":
            print(f"  lattice / {other}: {ratio(other, True).text()}")
    target_lib, target = TARGETS[draft]
    ok = True
    if target_lib in calls:
        for what, whole in (("all pairs", True), ("valid instances", False)):
            verdict = judge(ratio(target_lib, whole), lambda v: v >= target)
            ok = ok and verdict is not False
            print(f"  target: lattice >= {target}x {target_lib} on {what} -> "
                  f"{ratio(target_lib, whole).text()}: {verdict_text(verdict)}")
    return ok


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE)
    parser.add_argument("--reps", type=int, default=30,
                        help="passes over the pairs in a round's sweep")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds (default {DEFAULT_ROUNDS}; fewer than "
                        f"{MIN_ROUNDS}: shown, not judged)")
    parser.add_argument("--drafts", nargs="+", default=["2020-12", "7"], choices=list(DRAFT_DIRS))
    args = parser.parse_args(argv)
    if not (args.suite / "tests").is_dir():
        print(f"JSON-Schema-Test-Suite not found at {args.suite} (--suite DIR, or "
              "LATTICE_SHARED=<dir holding data/>)", file=sys.stderr)
        return 1
    print(f"python {sys.version.split()[0]}")
    results = [run(args.suite, draft, args.reps, args.rounds) for draft in args.drafts]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
