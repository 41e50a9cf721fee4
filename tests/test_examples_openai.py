"""Every example that picks its model through ``examples/_backend.py`` also runs offline with ``LATTICE_PROVIDER=openai``: OpenAIChatClient
against the mock server's Chat Completions face, printing the same lines."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from test_examples import EXAMPLES, EXPECTED, TIMEOUT_S, TIMING_LINES, example_files, offline_env


def backend_examples() -> List[str]:
    """The examples that pick their model through examples/_backend.py."""
    return [n for n in example_files() if "from _backend import" in (EXAMPLES / n).read_text()]


def run(name: str, tmp: Path) -> Tuple[int, str, str]:
    env = {k: v for k, v in offline_env().items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["LATTICE_PROVIDER"] = "openai"
    args = [a.format(tmp=tmp) for a in EXPECTED.get(name, ([], []))[0]]
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          encoding="utf-8", timeout=TIMEOUT_S)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Tuple[int, str, str]]:
    names = backend_examples()
    dirs = [tmp_path_factory.mktemp(n.replace(".py", "") + "-openai") for n in names]
    with ThreadPoolExecutor(len(names)) as pool:
        return dict(zip(names, pool.map(run, names, dirs)))


@pytest.mark.parametrize("name", backend_examples())
def test_example_runs_with_the_chat_client(name: str, runs: Dict[str, Tuple[int, str, str]]
                                           ) -> None:
    code, out, err = runs[name]
    assert code == 0, err
    assert "Traceback" not in err, err
    assert "mock Chat Completions API" in out, out
    for line in EXPECTED[name][1]:
        if line not in TIMING_LINES.get(name, []):
            assert line in out, f"{line!r} missing from:\n{out}"
