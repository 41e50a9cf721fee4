"""tests/real_parts.py: a test skipped for a missing real part says how to get it, and in CI
(CI=true) the skip is a failure, whether it comes from a test or from a whole module."""

import os
import subprocess
import sys
import textwrap

from helpers import ROOT

TESTS = os.path.join(str(ROOT), "tests")

CASES = """
    import pytest
    import real_parts


    def test_needs_a_server():
        real_parts.skip("redis-server is missing", "apt-get install redis-server")


    def test_plain_skip():
        pytest.skip("not on this platform")


    def test_runs():
        assert True
"""

MODULE = """
    import real_parts

    real_parts.require("no_such_module_for_lattice_tests")


    def test_never_collected():
        assert False
"""


def run(tmp_path, source, ci):
    path = tmp_path / "test_case.py"
    path.write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    env["PYTHONPATH"] = os.pathsep.join([TESTS, str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "real_parts", "-p",
         "no:cacheprovider", str(path), "--rootdir", str(tmp_path), "-c", os.devnull],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120)


def test_outside_ci_a_missing_part_skips_saying_how_to_get_it(tmp_path):
    done = run(tmp_path, CASES, ci=False)
    assert done.returncode == 0, done.stdout
    assert "needs a real part: redis-server is missing (apt-get install redis-server)" \
        in done.stdout
    assert "1 passed, 2 skipped" in done.stdout


def test_in_ci_a_missing_part_fails_and_other_skips_stay_skips(tmp_path):
    done = run(tmp_path, CASES, ci=True)
    assert done.returncode == 1, done.stdout
    assert "skipped in CI, where .ci/run installs every real part" in done.stdout
    assert "1 failed, 1 passed, 1 skipped" in done.stdout


def test_in_ci_a_module_skipped_for_a_missing_part_fails(tmp_path):
    outside = run(tmp_path, MODULE, ci=False)
    assert outside.returncode in (0, 5) and "1 skipped" in outside.stdout, outside.stdout  # 5: none ran
    assert "pip install -e '.[test]'" in outside.stdout
    inside = run(tmp_path, MODULE, ci=True)
    assert inside.returncode not in (0, 5), inside.stdout
    assert "no_such_module_for_lattice_tests is not installed" in inside.stdout
