"""Runs the MCP conformance suite's client scenarios against ``conformance_client.py``.

``python tests/mcp/mcp_conformance.py [filter...]`` prints one line per run (scenario at a protocol
version) and the count per version; ``test_conformance.py`` runs the same and fails on
any failure not listed in ``conformance_known_failures.txt``. The suite (npm
``@modelcontextprotocol/conformance``) needs Node 22, which ``.ci/run`` installs as the npm
package ``node`` into ``build/conformance`` beside the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PREFIX = Path(os.environ.get("LATTICE_MCP_CONFORMANCE", ROOT / "build" / "conformance"))
NODE = PREFIX / "node_modules" / ".bin" / "node"
SUITE = PREFIX / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
KNOWN = HERE / "conformance_known_failures.txt"
VERSIONS = ("2025-06-18", "2025-11-25", "2026-07-28")
# Extension scenarios counted as required (SPEC 25a "23:"), run at the suite's default.
EXTRA = ("auth/client-credentials-basic", "auth/client-credentials-jwt")

Run = Tuple[str, Optional[str]]  # (scenario, protocol version or None: the default)


def available() -> Optional[str]:
    """None when the suite can run here, else why not."""
    if not NODE.exists() or not SUITE.exists():
        return (f"needs the conformance suite and Node 22 under {PREFIX} (.ci/run installs "
                "them: npm install --prefix build/conformance node@22 "
                "@modelcontextprotocol/conformance)")
    return None


def runs() -> List[Run]:
    """Every client scenario at every one of VERSIONS it applies to, and EXTRA."""
    listing = subprocess.run([str(NODE), str(SUITE), "list", "--client"], check=True,
                             capture_output=True, text=True, timeout=60).stdout
    found: List[Run] = []
    for name, tags in re.findall(r"^\s+- (\S+) \[([^\]]*)\]", listing, re.M):
        found += [(name, v) for v in VERSIONS if v in tags.split(",")]
    return found + [(name, None) for name in EXTRA]


def label(run: Run) -> str:
    return f"{run[0]}@{run[1] or 'default'}"


def run_one(run: Run, workdir: Path) -> Tuple[bool, str]:
    """(passed, why not): every check of the run SUCCESS and the client exited 0."""
    scenario, version = run
    out = workdir / label(run).replace("/", "_")
    command = f"{sys.executable} {HERE / 'conformance_client.py'}"
    argv = [str(NODE), str(SUITE), "client", "--command", command, "--scenario", scenario,
            "-o", str(out), "--timeout", "40000"]
    if version is not None:
        argv += ["--spec-version", version]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(workdir))
    results = list(out.rglob("checks.json"))
    if not results:
        return False, f"no checks written (exit {done.returncode}): {done.stderr[-1500:]}"
    checks = json.loads(results[0].read_text())
    bad = [c for c in checks if c.get("status") not in ("SUCCESS", "INFO", "SKIPPED")]
    client_stderr = (results[0].parent / "stderr.txt").read_text(errors="replace")
    if bad or done.returncode != 0:
        why = "; ".join(f"{c.get('id')}: {c.get('status')} {c.get('errorMessage') or ''}"
                        for c in bad)
        return False, (why or f"exit {done.returncode}") + "\n--- client stderr tail:\n" \
            + client_stderr[-1500:]
    return True, ""


def run_all(workers: int = 4, only: Optional[List[Run]] = None) -> Dict[Run, Tuple[bool, str]]:
    todo = only if only is not None else runs()
    with tempfile.TemporaryDirectory(prefix="lattice-conformance-") as tmp:
        with ThreadPoolExecutor(workers) as pool:
            outcomes = list(pool.map(lambda r: run_one(r, Path(tmp)), todo))
    return dict(zip(todo, outcomes))


def known_failures() -> List[str]:
    lines = KNOWN.read_text().splitlines() if KNOWN.exists() else []
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def summary(results: Dict[Run, Tuple[bool, str]]) -> str:
    lines = []
    for version in VERSIONS + (None,):
        mine = [ok for (_, v), (ok, _) in results.items() if v == version]
        if mine:
            lines.append(f"{version or 'client-credentials'}: {sum(mine)}/{len(mine)}")
    total = [ok for ok, _ in results.values()]
    lines.append(f"total: {sum(total)}/{len(total)}")
    return ", ".join(lines)


def main() -> int:
    why = available()
    if why:
        print(why)
        return 2
    wanted = sys.argv[1:]
    todo = [r for r in runs() if not wanted or any(w in label(r) for w in wanted)]
    results = run_all(only=todo)
    for run, (ok, why) in sorted(results.items(), key=lambda item: label(item[0])):
        print(("PASS " if ok else "FAIL ") + label(run))
        if not ok and os.environ.get("VERBOSE"):
            print("    " + why.replace("\n", "\n    "))
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
