"""Every script in examples/ runs offline and says what it should.

Each example is run as its own process, the way a user runs it: no API key in the
environment (so it takes its offline path, against the bundled mock server) and the repo
root on ``PYTHONPATH`` (so it works without installing the package). The scripts start all
at once, which keeps the module about as slow as the slowest example.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 60
SLOW_S = 3.0  # an example should stay quick to run

# file name -> (extra command-line arguments, lines its output must contain)
EXPECTED: Dict[str, Tuple[List[str], List[str]]] = {
    "quickstart.py": ([], ["answer: Right now: Sunny", "structured: Forecast(city='Paris'"]),
    "resume_jsonl.py": ([], ["'What is my name?' -> 'Your name is Ada.'",
                             "the model was sent: user, assistant, user"]),
    "wsgi_app.py": (["--demo", "--db", "{tmp}/chat.db"],
                    ['"history_length": 4', "that is message 2 from you"]),
    "tools.py": ([], ["  -> present_plan(", "plan: Go to Lisbon", "ran in parallel"]),
    "structured_output.py": ([], ["rejected, the model is told:",
                                  "extracted: Quarterly planning review on 2025-03-14 at 10:30",
                                  "Li Wei       attendee (remote)"]),
    "notebook.py": ([], ["stream events, then ['assistant', 'result']", "**success**",
                         "interrupted after", "We talked about the Fibonacci numbers"]),
    "cancellation.py": ([], ["1. AbortSignal.timeout(800): error_abort",
                             "research noticed the signal",
                             "2. request_timeout_ms=500: error_timeout",
                             "3. agent.interrupt(): interrupted",
                             "afterwards: success", "all well-formed"]),
}

Run = Tuple[int, str, str, float]


def example_files() -> List[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def offline_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Run]]:
    """Start every example at once; collect (exit code, stdout, stderr, seconds)."""
    started: Dict[str, Tuple[subprocess.Popen[str], float]] = {}
    for name in example_files():
        tmp = tmp_path_factory.mktemp(name.replace(".py", ""))
        args = [a.format(tmp=tmp) for a in EXPECTED.get(name, ([], []))[0]]
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / name), *args], cwd=tmp, env=offline_env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8")
        started[name] = (process, time.monotonic())
    results: Dict[str, Run] = {}
    try:
        for name, (process, began) in started.items():
            out, err = process.communicate(timeout=TIMEOUT_S)
            results[name] = (process.returncode, out, err, time.monotonic() - began)
        yield results
    finally:
        for process, _ in started.values():
            if process.poll() is None:
                process.kill()
                process.communicate()


def test_every_example_is_checked() -> None:
    missing = [name for name in example_files() if name not in EXPECTED]
    assert not missing, f"add the expected output of {missing} to EXPECTED"
    gone = [name for name in EXPECTED if name not in example_files()]
    assert not gone, f"EXPECTED names examples that do not exist: {gone}"


@pytest.mark.parametrize("name", example_files())
def test_example_runs_offline(name: str, runs: Dict[str, Run]) -> None:
    code, out, err, seconds = runs[name]
    assert code == 0, f"{name} exited {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "offline" in out or name in ("resume_jsonl.py", "wsgi_app.py")
    for line in EXPECTED[name][1]:
        assert line in out, f"{name}: {line!r} not in its output:\n{out}"
    assert "Traceback" not in err, err


@pytest.mark.parametrize("name", example_files())
def test_example_is_quick(name: str, runs: Dict[str, Run]) -> None:
    # Measured with every example running at once, so this is a generous bound.
    assert runs[name][3] < SLOW_S * 2, f"{name} took {runs[name][3]:.1f} s"
