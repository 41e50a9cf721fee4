"""Real parts the tests start (Redis, PostgreSQL, Chromium, job engines) and what happens
without them.

A test that needs one skips, saying how to get it, when this machine lacks it. In CI
(``CI=true``, which ``.ci/run`` sets) such a skip is a failure instead (conftest.py): CI
installs every real part, so a skip there would mean a test silently stopped running.

Getting them on Debian/Ubuntu: ``apt-get install redis-server chromium chromium-driver
postgresql`` and ``pip install -e '.[test]'`` (celery, rq and dbos on Python 3.10+).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any, Optional

import pytest

PREFIX = "needs a real part: "
PIP_TEST = "pip install -e '.[test]'"
NEWER_PYTHON_ONLY = {"celery", "rq", "dbos", "redis", "mcp"}  # test extras on 3.10+ only


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def reason(what: str, how: str) -> str:
    """A skip reason that CI turns into a failure: ``what`` is missing, ``how`` gets it."""
    return f"{PREFIX}{what} ({how})"


def skip(what: str, how: str) -> None:
    pytest.skip(reason(what, how), allow_module_level=True)


def require(module: str, how: Optional[str] = None) -> ModuleType:
    """``module`` imported, or a skip saying how to install it. A test extra that setup.cfg
    installs only on Python 3.10+ skips plainly on older Pythons (CI too)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        if top in NEWER_PYTHON_ONLY and sys.version_info < (3, 10):
            pytest.skip(f"{top} is a test extra only on Python 3.10+", allow_module_level=True)
        skip(f"{module} is not installed", how or PIP_TEST)
    raise AssertionError("not reached")


def fail_in_ci(report: Any) -> None:
    """Turn ``report`` (a test's or a module's) into a failure when it is a skip for a
    missing real part and this is CI."""
    if not (report.skipped and in_ci()):
        return
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    if PREFIX not in text:
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped in CI, where .ci/run installs every real part the tests "
                       f"need: {text}")


# The hooks conftest.py imports (a plugin of their own too: ``-p real_parts``).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    fail_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: Any) -> Any:
    outcome = yield
    fail_in_ci(outcome.get_result())
