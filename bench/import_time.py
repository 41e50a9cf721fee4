"""How long ``import lattice`` takes in a fresh interpreter, next to other agent libraries.

    python bench/import_time.py [--runs 10] [--no-breakdown]

Each module is imported in a new ``python -c "import X"`` process, in ``--runs`` interleaved
rounds (10 by default; each round runs ``python -c pass`` and every import once, the order
rotated each round): a module's figure in a round is its wall time minus that round's
``python -c pass`` (the interpreter's own start-up, ``site`` included), printed as the median
over rounds with its min-max; a ratio is taken within each round. Libraries that are not
installed are skipped. Targets, judged on the medians: ``import lattice`` under 30 ms, and
at most 0.35x ``import requests`` (issue 28); with fewer than 5 rounds both are shown, not
judged (#39). Two
rows count what a first request needs too ("ready to send"): ``requests`` with a
``Session`` and a prepared POST, and lattice with an ``AnthropicClient`` and its pooled
session (which is when lattice imports ``requests``).

Bytecode is cached as in a normal install (a pip-installed package ships its ``.pyc``), in
a temporary ``PYTHONPYCACHEPREFIX``, so the checkout is left clean and an environment with
``PYTHONDONTWRITEBYTECODE=1`` does not make every run compile every module from source.
``--no-pyc`` measures that cold case instead.

Then, unless ``--no-breakdown``, the lattice modules that cost most, from
``python -X importtime -c "import lattice"`` (self time, which -X importtime inflates
somewhat; good for ranking, not for absolute figures).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from _rounds import MIN_ROUNDS, Spread, judge, verdict_text  # noqa: E402

TARGET_MS = 30.0
TARGET_OF_REQUESTS = 0.35
# (label, module) pairs: lattice first, then what people compare it with.
CANDIDATES = [
    ("lattice", "lattice"),
    ("requests (lattice's only dependency)", "requests"),
    ("anthropic (Anthropic SDK)", "anthropic"),
    ("agents (OpenAI Agents SDK)", "agents"),
    ("requests, ready to send", "requests+ready"),
    ("lattice, ready to send (AnthropicClient)", "lattice+ready"),
]
# What a "module" of CANDIDATES runs, when it is more than an import.
CODE = {
    "requests+ready": "import requests; s = requests.Session(); "
                      "s.prepare_request(requests.Request('POST', 'http://127.0.0.1/', "
                      "data=b'{}'))",
    "lattice+ready": "import lattice; c = lattice.AnthropicClient('sk-ant-0123456789'); "
                     "c._get_session()",
}


_PYCACHE: Optional[str] = None  # None: no bytecode cache at all (--no-pyc)


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    # Measure this checkout's lattice, installed or not.
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    if _PYCACHE is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE
    return env


def _run_once(code: str, env: Dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - started) * 1000.0


def time_imports(modules: List[str], runs: int) -> Tuple[Spread, Dict[str, List[float]]]:
    """``(baseline ms, {module: ms over the baseline, per round})`` over ``runs`` rounds.

    Each round runs the bare interpreter and every import once, the order rotated from round
    to round, and each import is compared with the baseline of its own round: a machine
    whose speed drifts (other work, CPU frequency) then shifts both sides of the difference
    alike.
    """
    env = _env()
    names = ["pass"] + modules
    codes = {"pass": "pass", **{m: CODE.get(m, f"import {m}") for m in modules}}
    for code in codes.values():  # warm-up: fills the OS file cache and the bytecode cache
        _run_once(code, env)
    times: Dict[str, List[float]] = {name: [] for name in names}
    for round_ in range(runs):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            times[name].append(_run_once(codes[name], env))
    baselines = times.pop("pass")
    return Spread(baselines), {m: [max(0.0, t - base) for t, base in zip(v, baselines)]
                               for m, v in times.items()}


def installed(module: str) -> bool:
    if module.startswith("lattice"):
        return True
    module = module.split("+")[0]
    return importlib.util.find_spec(module) is not None


def _is_ours(module: str) -> bool:
    return module == "lattice" or module.startswith("lattice.")


def breakdown() -> List[Tuple[int, int, str, str]]:
    """``(self µs, cumulative µs, module, imported by)`` for every module that
    ``import lattice`` loads, from ``python -X importtime``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import lattice"],
                          env=_env(), capture_output=True, text=True, check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((int(self_us), int(cumulative_us), name.strip(), depth))
    # Lines come children first; read backwards, a module's parent is the nearest
    # earlier-read line of smaller depth.
    found = []
    stack: List[Tuple[int, str]] = []
    for self_us, cumulative_us, name, depth in reversed(rows):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        stack.append((depth, name))
        found.append((self_us, cumulative_us, name, parent))
    return found


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10,
                        help=f"interleaved rounds (default 10; fewer than {MIN_ROUNDS}: "
                        "shown, not judged)")
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--no-pyc", action="store_true",
                        help="no bytecode cache: every module is compiled on every run")
    args = parser.parse_args(argv)
    global _PYCACHE
    with tempfile.TemporaryDirectory(prefix="lattice-import-bench-") as pycache:
        _PYCACHE = None if args.no_pyc else pycache
        return _report(args)


def _report(args: argparse.Namespace) -> int:

    modules = [module for _, module in CANDIDATES if installed(module)]
    baseline, rounds = time_imports(modules, args.runs)
    costs = {m: Spread(v).median for m, v in rounds.items()}
    cache = "no .pyc" if _PYCACHE is None else ".pyc cached"
    print(f"python {sys.version.split()[0]}, {args.runs} interleaved rounds of fresh "
          f"processes, {cache}; bare interpreter start-up {baseline.text('.1f')} ms "
          "(subtracted within each round)\n")
    print(f"{'import':<40} {'ms: median (min-max)':>28}")
    print(f"{'-' * 40} {'-' * 28}")
    for label, module in CANDIDATES:
        shown = Spread(rounds[module]).text(".1f") if module in rounds else "(not installed)"
        print(f"{label:<40} {shown:>28}")
    lattice = Spread(rounds["lattice"])
    lattice_ms = lattice.median
    fast = judge(lattice, lambda v: v < TARGET_MS)
    verdict = "within" if lattice_ms < TARGET_MS else "OVER"
    others = ", ".join(f"{costs[m] / lattice_ms:.1f}x lattice for {m}" for _, m in CANDIDATES
                       if m != "lattice" and m in costs)
    print(f"\nimport lattice: {lattice.text('.1f')} ms, {verdict} the {TARGET_MS:.0f} ms "
          f"target ({lattice_ms / TARGET_MS:.2f} of it: {verdict_text(fast)})"
          + (f"; {others}" if others else ""))
    ok = fast is not False
    if "requests" in rounds:
        ratio = Spread([a / max(b, 1e-9) for a, b in zip(rounds["lattice"], rounds["requests"])])
        light = judge(ratio, lambda v: v <= TARGET_OF_REQUESTS)
        ok = ok and light is not False
        print(f"import lattice / import requests within a round: {ratio.text()} (target <= "
              f"{TARGET_OF_REQUESTS}): {verdict_text(light)}")
        ready = Spread([a / max(b, 1e-9) for a, b in
                        zip(rounds["lattice+ready"], rounds["requests+ready"])])
        print(f"ready to send, lattice / requests: {ready.text()} (for information: lattice "
              "then holds requests too)")
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, lattice; print(sorted(m for m in "
         "('requests', 'urllib3', 'sqlite3', 'http.server', 'asyncio') if m in sys.modules))"],
        env=_env(), capture_output=True, text=True, check=True).stdout.strip()
    print(f"heavy modules loaded by 'import lattice': {loaded}")

    if not args.no_breakdown:
        rows = breakdown()
        print("\nwhere the time goes (python -X importtime, which inflates the figures; "
              "good for ranking):")
        print(f"{'lattice module':<32} {'self ms':>8}   {'other module (imported by)':<40} "
              f"{'cumul. ms':>9}")
        ours = sorted((r for r in rows if _is_ours(r[2])), reverse=True)[:8]
        foreign = sorted(((r[1], r[2], r[3]) for r in rows
                          if not _is_ours(r[2]) and _is_ours(r[3])), reverse=True)[:8]
        for i in range(max(len(ours), len(foreign))):
            left = f"{ours[i][2]:<32} {ours[i][0] / 1000:>8.2f}" if i < len(ours) else " " * 41
            right = (f"{foreign[i][1] + ' (' + foreign[i][2] + ')':<40} "
                     f"{foreign[i][0] / 1000:>9.2f}") if i < len(foreign) else ""
            print(f"{left}   {right}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
