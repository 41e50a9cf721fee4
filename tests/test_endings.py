"""Endings (lattice/endings.py): one table, one conversion to ResultMessage."""

import pytest

from lattice import MissingOutputError, ResultMessage, Usage
from lattice.endings import KINDS, Ending


def test_every_result_subtype_has_one_row():
    assert set(KINDS) == {"success", "interrupted", "awaiting_approval", "error_max_turns",
                          "error_abort", "error_timeout", "error_missing_output",
                          "error_max_output_retries", "error_max_budget", "closed", "raised"}
    assert all(kind.is_error == name.startswith("error") for name, kind in KINDS.items()
               if name not in ("closed", "raised"))


def test_to_result_fills_the_last_text_and_the_stats():
    error = MissingOutputError("x")
    result = Ending("error_missing_output", error=error).to_result(
        last_text="last", usage=Usage(1, 2), stop_reason="end_turn", num_turns=3,
        duration_ms=4)
    assert isinstance(result, ResultMessage) and result.is_error and result.result == "last"
    assert (result.usage.output_tokens, result.num_turns, result.error) == (2, 3, error)


def test_raised_endings_raise_and_unknown_subtypes_are_refused():
    with pytest.raises(KeyError):
        Ending.raised(KeyError("boom")).to_result(last_text=None, usage=Usage(),
                                                  stop_reason=None, num_turns=0, duration_ms=0)
    with pytest.raises(ValueError, match="unknown ending"):
        Ending("nope")
