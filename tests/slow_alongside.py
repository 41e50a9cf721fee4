"""The whole suite in about the time of its longer half: the ``slow`` tests run alongside.

The ``slow`` tests (real worker processes killed and restarted, crash loops, browsers) spend
most of their time waiting for processes and sockets, not computing. So when pytest runs the
whole suite the plain way (``python3 -m pytest``: no ``-m``, no ``-k``, no paths), they run
in a second pytest process started at once, while this one runs the rest; the session waits
for it at the end, prints its summary (its whole report when it failed) and fails if it
failed. Any narrower run, or ``LATTICE_SLOW_INLINE=1``, runs everything in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any, Optional

import pytest

CHILD = "LATTICE_SLOW_ALONGSIDE"  # set in the child: it runs its tests itself
INLINE = "LATTICE_SLOW_INLINE"
WAIT_S = 1800  # the child's tests have their own deadlines; this only bounds a hang

_child: Optional[subprocess.Popen] = None
_log: Any = None
_status: Optional[int] = None


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
    global _child, _log
    if not _whole_default_run(config):
        return
    _log = tempfile.TemporaryFile()
    command = [sys.executable, "-m", "pytest", "-q", "-m", "slow"]
    if getattr(config.option, "maxfail", 0) == 1:  # -x
        command.append("-x")
    _child = subprocess.Popen(command, cwd=str(config.rootpath), stdin=subprocess.DEVNULL, stdout=_log,
                              stderr=subprocess.STDOUT, env=dict(os.environ, **{CHILD: "1"}))
    config.option.markexpr = "not slow"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _status
    if _child is None:
        return
    try:
        _status = _child.wait(WAIT_S)
    except subprocess.TimeoutExpired:
        _child.kill()
        _status = _child.wait()
    if _status not in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _child is None or _log is None or _status is None:
        return
    _log.seek(0)
    lines = _log.read().decode("utf-8", "replace").rstrip().splitlines()
    failed = _status not in (0, pytest.ExitCode.NO_TESTS_COLLECTED)
    terminalreporter.section("the slow tests, run alongside (tests/slow_alongside.py)",
                             red=failed, green=not failed)
    for line in lines if failed else lines[-1:]:
        terminalreporter.line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _child is not None and _child.poll() is None:  # interrupted (Ctrl-C): stop it too
        _child.kill()
        _child.wait()
    if _log is not None:
        _log.close()
