"""The whole suite in about the time of its longer half: the ``slow`` tests run alongside.

The ``slow`` tests (real worker processes killed and restarted, crash loops, browsers) spend
most of their time waiting for processes and sockets, not computing. So when pytest runs the
whole suite the plain way (``python3 -m pytest``: no ``-m``, no ``-k``, no paths), they run
in two more pytest processes started at once (``SHARDS``), while this one runs the rest; the
session waits for them at the end, prints their summaries (the whole report of one that
failed) and fails if one failed. Any narrower run, or ``LATTICE_SLOW_INLINE=1``, runs everything in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any, List, Tuple

import pytest

CHILD = "LATTICE_SLOW_ALONGSIDE"  # set in the child: it runs its tests itself
INLINE = "LATTICE_SLOW_INLINE"
WAIT_S = 1800  # the child's tests have their own deadlines; this only bounds a hang

# Two children, split by folder so that each takes about half of the slow tests' time.
SHARDS = [["tests/background", "tests/examples", "tests/stores"],
          ["--ignore=tests/background", "--ignore=tests/examples", "--ignore=tests/stores"]]

_children: List[Tuple[subprocess.Popen, Any]] = []
_statuses: List[int] = []


def _whole_default_run(config: pytest.Config) -> bool:
    if os.environ.get(CHILD) or os.environ.get(INLINE):
        return False
    option = config.option
    if option.markexpr or option.keyword or getattr(option, "collectonly", False):
        return False
    if getattr(option, "lf", False) or getattr(option, "failedfirst", False):
        return False
    source = getattr(config, "args_source", None)
    return source is not None and source == pytest.Config.ArgsSource.TESTPATHS


def pytest_configure(config: pytest.Config) -> None:
    if not _whole_default_run(config):
        return
    base = [sys.executable, "-m", "pytest", "-q", "-m", "slow"]
    if getattr(config.option, "maxfail", 0) == 1:  # -x
        base.append("-x")
    for shard in SHARDS:
        paths = [a for a in shard if not a.startswith("-")]
        kept = [a for a in shard if a.startswith("-") or (config.rootpath / a).exists()]
        if paths and len(kept) == len(shard) - len(paths):
            continue  # none of its folders here
        log = tempfile.TemporaryFile()
        child = subprocess.Popen(base + kept, cwd=str(config.rootpath),
                                 stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, env=dict(os.environ, **{CHILD: "1"}))
        _children.append((child, log))
    config.option.markexpr = "not slow"


def _failed(status: int) -> bool:
    return status not in (0, pytest.ExitCode.NO_TESTS_COLLECTED)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for child, _log in _children:
        try:
            _statuses.append(child.wait(WAIT_S))
        except subprocess.TimeoutExpired:
            child.kill()
            _statuses.append(child.wait())
    if any(_failed(status) for status in _statuses):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _children or len(_statuses) != len(_children):
        return
    failed = any(_failed(status) for status in _statuses)
    terminalreporter.section("the slow tests, run alongside (tests/slow_alongside.py)",
                             red=failed, green=not failed)
    for (_child, log), status in zip(_children, _statuses):
        log.seek(0)
        lines = log.read().decode("utf-8", "replace").rstrip().splitlines()
        for line in lines if _failed(status) else lines[-1:]:
            terminalreporter.line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    for child, log in _children:
        if child.poll() is None:  # interrupted (Ctrl-C): stop it too
            child.kill()
            child.wait()
        log.close()
