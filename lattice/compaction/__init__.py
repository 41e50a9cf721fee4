"""Automatic compaction (SPEC 9): the policy and the history surgery (``rules.py``, pure
functions), the summary request (``summary_request.py``), and the ``Compactor`` the loop
talks to.

The documented helpers are importable from here (``lattice.compaction.find_cut``, ...).
"""

from __future__ import annotations

from .rules import (
    AutoCompact,
    find_cut,
    prompt_size,
    rebuild,
    resolve_auto_compact,
    should_compact,
    summary_text,
    wrap_summary,
)
from .summary_request import DEFAULT_COMPACTION_PROMPT, summary_messages

__all__ = ["DEFAULT_COMPACTION_PROMPT", "AutoCompact", "resolve_auto_compact", "prompt_size",
           "should_compact", "find_cut", "summary_messages", "summary_text", "wrap_summary",
           "rebuild"]
