"""The public surface of SPEC section 1, and what ``import lattice`` costs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_spec_conformance import PUBLIC

import lattice

ROOT = Path(__file__).resolve().parents[1]

@pytest.mark.parametrize("name", PUBLIC)
def test_spec_name_in_all(name):
    assert name in lattice.__all__  # importable: test_spec_conformance.py


def test_all_names_resolve():
    for name in lattice.__all__:
        assert getattr(lattice, name) is not None, name


def test_api_errors_carry_details():
    e = lattice
    err = e.RateLimitError("slow down", status_code=429, request_id="req_1", body={"x": 1})
    assert (err.status_code, err.request_id, err.body) == (429, "req_1", {"x": 1})
    assert "slow down" in str(err)
    from lattice.errors import error_class_for_type, status_error_class

    assert error_class_for_type("overloaded_error") is e.OverloadedError
    assert status_error_class(503) is e.InternalServerError
    assert status_error_class(529) is e.OverloadedError
    assert issubclass(e.MaxTurnsExceededError, e.LatticeError)


def test_import_lattice_stays_in_stdlib():
    code = ("import sys, json; before = set(sys.modules); import lattice; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    loaded = json.loads(out)
    assert "requests" not in loaded and "urllib3" not in loaded
    if hasattr(sys, "stdlib_module_names"):
        foreign = [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names
                   and m.split(".")[0] != "lattice"]
        assert foreign == []


def test_usage_arithmetic():
    u = lattice.Usage(1, 2, 3, 4) + lattice.Usage(10, 20, 30, 40)
    assert u.to_dict() == {"input_tokens": 11, "output_tokens": 22,
                           "cache_creation_input_tokens": 33, "cache_read_input_tokens": 44}
    assert lattice.Usage.from_dict({"input_tokens": None, "output_tokens": True}) == lattice.Usage()


def test_result_message_prints_well():
    r = lattice.ResultMessage("success", result="x" * 200, num_turns=2, duration_ms=5)
    assert len(repr(r)) < 150 and "success" in repr(r)
    assert "**success**" in r._repr_markdown_()
    assert json.loads(json.dumps(r.to_dict()))["subtype"] == "success"
