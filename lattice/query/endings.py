"""How a query ends: one value, made where the loop (or a race) decides, turned into the
``ResultMessage`` in one place.

Every ending is a row of ``ENDINGS``: its subtype, whether it is an error, whether it stops
work still in flight (the run's signal fires: tools and the model client see it), and what
the model reads for a call it asked for that was never answered because the query ended
this way. Adding an ending is adding a row (and, where the loop decides it, one
``return``).

Two ways out are not results: ``closed`` (the caller closed or dropped the generator; no
``ResultMessage`` is produced, the history is still repaired) and an exception escaping the
loop (raised from ``query``/``prompt``; see ``Ending.raised``).
"""

from __future__ import annotations

from typing import (
    Any,
    Callable,
    Dict,
    List,
    Literal,
    NamedTuple,
    Optional,
    Tuple,
    Union,
    cast,
    get_args,
)

from ..messages import ResultMessage, ResultSubtype
from ..tools.definition import ToolCall
from ..usage import Usage

__all__ = ["Ending", "ENDINGS", "Traits", "ResultSubtype", "EndingName", "RESULT_SUBTYPES"]


EndingName = Union[ResultSubtype, Literal["closed", "raised"]]

RESULT_SUBTYPES: Tuple[str, ...] = get_args(ResultSubtype)
"""The endings that are results (what a recorded result's subtype may be)."""


class Traits(NamedTuple):
    is_error: bool
    cancels: bool  # ending this way fires the run's signal (work in flight should stop)
    why: str  # completes "The call was not run: ..." for calls left unanswered


ENDINGS: Dict[EndingName, Traits] = {
    "success": Traits(False, False, "the query ended"),
    "interrupted": Traits(False, True, "the query was interrupted"),
    "awaiting_approval": Traits(False, False, "the query is waiting for approval"),
    "error_max_turns": Traits(True, True, "the query reached max_turns"),
    "error_abort": Traits(True, True, "the query was aborted"),
    "error_timeout": Traits(True, True, "the model request timed out"),
    "error_missing_output": Traits(True, True, "the query ended without an output"),
    "error_max_output_retries": Traits(True, True, "the query ran out of output retries"),
    "error_max_budget": Traits(True, True, "the query reached max_budget_tokens"),
    # Not results:
    "closed": Traits(False, True, "the caller stopped the query"),
    "raised": Traits(True, True, "the query failed"),
}


class Ending:
    """How one query ended. ``result`` None means "the last reply's text"."""

    __slots__ = ("subtype", "result", "structured_result", "error", "pending")

    def __init__(self, subtype: EndingName, *, result: Optional[str] = None,
                 structured_result: Any = None, error: Optional[BaseException] = None,
                 pending: Optional[List[ToolCall]] = None) -> None:
        if subtype not in ENDINGS:
            raise ValueError(f"unknown ending {subtype!r}")
        self.subtype = subtype
        self.result = result
        self.structured_result = structured_result
        self.error = error
        self.pending = pending

    @classmethod
    def raised(cls, error: BaseException) -> Ending:
        """An exception escaped the loop: the consumer raises it."""
        return cls("raised", error=error)

    @property
    def traits(self) -> Traits:
        return ENDINGS[self.subtype]

    def to_result(self, *, last_text: Callable[[], Optional[str]], usage: Usage,
                  stop_reason: Optional[str], num_turns: int, duration_ms: int,
                  run_id: Optional[str] = None) -> ResultMessage:
        """The public ``ResultMessage`` (raises the error of a ``raised`` ending)."""
        if self.subtype == "raised":
            assert self.error is not None
            raise self.error
        result = ResultMessage(
            cast(ResultSubtype, self.subtype), is_error=self.traits.is_error,
            result=self.result if self.result is not None else last_text(),
            structured_result=self.structured_result, usage=usage, stop_reason=stop_reason,
            num_turns=num_turns, duration_ms=duration_ms, error=self.error,
            pending_approvals=self.pending, run_id=run_id)
        return result

    def __repr__(self) -> str:
        return f"<Ending {self.subtype} {self.error!r}>"
