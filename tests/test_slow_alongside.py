"""tests/slow_alongside.py: on a whole-suite run the slow tests run in a second process;
its failures fail the run and are shown; a narrower run keeps them in the same process."""

import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
pytest_plugins = ["pytester"]

PROJECT = {
    "pyproject.toml": """
[tool.pytest.ini_options]
testpaths = ["t"]
addopts = "-p no:cacheprovider"
markers = ["slow: slow"]
""",
    "t/conftest.py": """
from slow_alongside import (pytest_configure, pytest_sessionfinish,  # noqa: F401
                            pytest_terminal_summary, pytest_unconfigure)
""",
    "t/test_fast.py": "def test_fast():\n    assert True\n",
}


def project(pytester, slow_body):
    for name, text in dict(PROJECT, **{"t/test_slow.py": f"""
import os, pytest

@pytest.mark.slow
def test_slow():
    print("slow ran in", "the child" if os.environ.get("LATTICE_SLOW_ALONGSIDE") else "main")
    {slow_body}
"""}).items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("LATTICE_SLOW_ALONGSIDE", "LATTICE_SLOW_INLINE"):
        monkeypatch.delenv(name, raising=False)


def test_a_whole_run_runs_the_slow_tests_in_a_child_and_fails_with_them(pytester, env):
    project(pytester, "assert False, 'the slow one broke'")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "1 passed, 1 deselected" in out  # this process: the fast test only
    assert "the slow tests, run alongside" in out
    assert "the slow one broke" in out and "slow ran in the child" in out


def test_a_passing_child_leaves_the_run_green(pytester, env):
    project(pytester, "pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.OK
    assert "1 passed, 1 deselected" in result.stdout.str()


@pytest.mark.parametrize("args", [["-m", "slow or not slow"], ["t/test_slow.py"],
                                  ["-k", "slow"]])
def test_a_narrower_run_keeps_the_slow_tests_in_its_own_process(pytester, env, args):
    project(pytester, "assert False, 'ran here'")
    result = pytester.runpytest_subprocess(*args, "-s")
    assert "slow ran in main" in result.stdout.str()
    assert "run alongside" not in result.stdout.str()
