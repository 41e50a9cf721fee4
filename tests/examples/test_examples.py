"""Every script in examples/ runs offline and says what it should.

Each example is run as its own process, the way a user runs it: no API key in the
environment (so it takes its offline path, against the bundled mock server) and the repo
root on ``PYTHONPATH`` (so it works without installing the package). The scripts start all
at once, which keeps the module about as slow as the slowest example.

Two checks depend on the wall clock: how long an example takes, and the lines of
``cancellation.py`` that show a deadline cutting a tool off (its first model request must
come back within the deadline). On a loaded machine (every example starting at once, other
test runs beside this one) those can miss for reasons that are not the example's; such a
miss is measured again with the example running alone, up to ``ATTEMPTS`` times in all.
Anything else (an exit code, a traceback, a missing line that does not depend on timing)
fails at once.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest
import real_parts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 60
SLOW_S = 3.0  # an example should stay quick to run
ATTEMPTS = 3  # for the checks that depend on the wall clock (see the module docstring)

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
    "mcp_oauth_cli.py": (["--demo"], ["approved on the consent page", "tools: add, whoami",
                                      "add(2, 3) = 5"]),
    "mcp_oauth_web.py": (["--demo"], ["sent to the consent page", "tools: add, whoami"]),
    "mcp_tools.py": ([], ["tools: text_echo, text_word_count", "  -> text_word_count(",
                          "  <- 9", "answer: The sentence has 9 words", "server closed: True"]),
    "subagents.py": ([], ["summariser (via Chat Completions) said: Subagents carry",
                          "usage by model: {'mock-model': ", "'small-model': ",
                          "waiting for approval: publish 'Subagents', path ['toolu_post', "
                          "'toolu_pub']", "answer: Research done. Done: published",
                          "published: True"]),
    "cancellation.py": ([], ["1. AbortSignal.timeout(800): error_abort",
                             "research noticed the signal",
                             "2. request_timeout_ms=500: error_timeout",
                             "3. agent.interrupt(): interrupted",
                             "afterwards: success", "all well-formed"]),
}
# Examples that start a server built with the ``mcp`` SDK (a test extra on Python 3.10+).
NEEDS_MCP = {"mcp_oauth_cli.py", "mcp_oauth_web.py"}
# Lines that only appear when the machine is quick enough (see the module docstring).
TIMING_LINES: Dict[str, List[str]] = {
    "cancellation.py": ["research noticed the signal"],
}

Run = Tuple[int, str, str, float]


def has_mcp() -> bool:
    return importlib.util.find_spec("mcp") is not None


def require_parts(name: str) -> None:
    if name in NEEDS_MCP:
        real_parts.require("mcp.server.mcpserver")


def example_files() -> List[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def offline_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def start(name: str, tmp: Path) -> subprocess.Popen[str]:
    args = [a.format(tmp=tmp) for a in EXPECTED.get(name, ([], []))[0]]
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / name), *args], cwd=tmp, env=offline_env(),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, encoding="utf-8")


def finish(process: subprocess.Popen[str], began: float) -> Run:
    """Wait for ``process``; its own run time, measured when it ended."""
    try:
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return (process.returncode, out, err, time.monotonic() - began)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Run]]:
    """Start every example at once; collect (exit code, stdout, stderr, seconds).

    Each process is waited for by its own thread, so an example's time is its own, not
    that of the slowest example waited for before it.
    """
    results: Dict[str, Run] = {}
    failures: List[BaseException] = []

    def wait(name: str, process: subprocess.Popen[str], began: float) -> None:
        try:
            results[name] = finish(process, began)
        except BaseException as exc:  # noqa: B036 - reported by the fixture
            failures.append(exc)

    waiters = []
    for name in example_files():
        if name in NEEDS_MCP and not has_mcp():
            continue  # its tests skip, saying why
        tmp = tmp_path_factory.mktemp(name.replace(".py", ""))
        process = start(name, tmp)
        waiters.append(threading.Thread(target=wait, args=(name, process, time.monotonic())))
    for waiter in waiters:
        waiter.start()
    for waiter in waiters:
        waiter.join()
    if failures:
        raise failures[0]
    yield results


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Run]:
    """Run one example by itself (the retry for a check that depends on the clock)."""

    def run(name: str) -> Run:
        tmp = tmp_path_factory.mktemp(name.replace(".py", "") + "-alone")
        return finish(start(name, tmp), time.monotonic())

    return run


def test_every_example_is_checked() -> None:
    missing = [name for name in example_files() if name not in EXPECTED]
    assert not missing, f"add the expected output of {missing} to EXPECTED"
    gone = [name for name in EXPECTED if name not in example_files()]
    assert not gone, f"EXPECTED names examples that do not exist: {gone}"


def output_problem(name: str, run: Run) -> Tuple[Optional[str], bool]:
    """What is wrong with ``run`` (None if nothing), and whether it may be the clock's fault."""
    code, out, err, _ = run
    if code != 0:
        return f"{name} exited {code}\nstdout:\n{out}\nstderr:\n{err}", False
    if "Traceback" in err:
        return f"{name} wrote a traceback:\n{err}", False
    if not ("offline" in out or name in ("resume_jsonl.py", "wsgi_app.py")):
        return f"{name} did not take its offline path:\n{out}", False
    missing = [line for line in EXPECTED[name][1] if line not in out]
    if missing:
        timing = all(line in TIMING_LINES.get(name, []) for line in missing)
        return f"{name}: {missing} not in its output:\n{out}", timing
    return None, False


@pytest.mark.parametrize("name", example_files())
def test_example_runs_offline(name: str, runs: Dict[str, Run],
                              alone: Callable[[str], Run]) -> None:
    require_parts(name)
    problem, timing = output_problem(name, runs[name])
    attempt = 1
    while problem is not None and timing and attempt < ATTEMPTS:
        attempt += 1
        problem, timing = output_problem(name, alone(name))
    assert problem is None, f"(attempt {attempt} of {ATTEMPTS}) {problem}"


@pytest.mark.parametrize("name", example_files())
def test_example_is_quick(name: str, runs: Dict[str, Run],
                          alone: Callable[[str], Run]) -> None:
    require_parts(name)
    # The first measurement has every example running at once: a generous bound. A miss
    # is measured again with the example alone (a loaded machine is not the example's fault),
    # and the bound scales with how slowly this machine starts Python and imports lattice
    # right then (0.3 s when quiet), so a busy machine stretches both alike.
    times = [runs[name][3]]
    bound = SLOW_S * 2
    while times[-1] >= bound and len(times) < ATTEMPTS:
        bound = SLOW_S * 2 * max(1.0, startup_s() / QUIET_STARTUP_S)
        times.append(alone(name)[3])
    assert min(times) < bound, (f"{name} took {', '.join(f'{t:.1f}' for t in times)} s "
                                f"(bound {bound:.1f} s)")


QUIET_STARTUP_S = 0.3  # `python -c "import lattice, requests"` on a quiet machine


def startup_s() -> float:
    """How long this machine takes, now, to start Python and import lattice and requests."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import lattice, requests"], env=offline_env(),
                   check=True, capture_output=True, timeout=TIMEOUT_S)
    return time.perf_counter() - started


# -- the same examples with LATTICE_PROVIDER=openai -------------------------------------
# Every example that picks its model through ``examples/_backend.py`` also runs offline with ``LATTICE_PROVIDER=openai``: OpenAIChatClient
# against the mock server's Chat Completions face, printing the same lines.


def backend_examples() -> List[str]:
    """The examples that pick their model through examples/_backend.py."""
    return [n for n in example_files() if "from _backend import" in (EXAMPLES / n).read_text()]


def run_openai(name: str, tmp: Path, provider: str = "openai") -> Tuple[int, str, str]:
    env = {k: v for k, v in offline_env().items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["LATTICE_PROVIDER"] = provider
    args = [a.format(tmp=tmp) for a in EXPECTED.get(name, ([], []))[0]]
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          encoding="utf-8", timeout=TIMEOUT_S)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def openai_runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Tuple[int, str, str]]:
    names = backend_examples()
    dirs = [tmp_path_factory.mktemp(n.replace(".py", "") + "-openai") for n in names]
    with ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(run_openai, names, dirs)))


@pytest.mark.parametrize("name", backend_examples())
def test_example_runs_with_the_chat_client(name: str, openai_runs: Dict[str, Tuple[int, str, str]]
                                           ) -> None:
    code, out, err = openai_runs[name]
    assert code == 0, err
    assert "Traceback" not in err, err
    assert "mock Chat Completions API" in out, out
    for line in EXPECTED[name][1]:
        if line not in TIMING_LINES.get(name, []):
            assert line in out, f"{line!r} missing from:\n{out}"


@pytest.fixture(scope="module")
def responses_runs(tmp_path_factory: pytest.TempPathFactory
                   ) -> Dict[str, Tuple[int, str, str]]:
    names = backend_examples()
    dirs = [tmp_path_factory.mktemp(n.replace(".py", "") + "-responses") for n in names]
    with ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(run_openai, names, dirs,
                                        ["openai-responses"] * len(names))))


@pytest.mark.parametrize("name", backend_examples())
def test_example_runs_with_the_responses_client(
        name: str, responses_runs: Dict[str, Tuple[int, str, str]]) -> None:
    """``LATTICE_PROVIDER=openai-responses``: OpenAIResponsesClient against the mock's
    /v1/responses (strict: every request the examples make is one the API accepts)."""
    code, out, err = responses_runs[name]
    assert code == 0, err
    assert "Traceback" not in err, err
    assert "mock Responses API" in out, out
    for line in EXPECTED[name][1]:
        if line not in TIMING_LINES.get(name, []):
            assert line in out, f"{line!r} missing from:\n{out}"
