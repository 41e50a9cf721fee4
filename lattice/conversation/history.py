"""The conversation's messages: the history list and its provider-ready twin.

Memory is the truth; the store follows it (``store_link.py``: every write goes to the
store first and lands here after). ``sendable`` holds one ``{"role", "content"}`` dict per
entry, made once when the entry is written, so building a request copies a list of
references; ``marks`` counts the cache marks it carries once per message.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List

from ..messages import sendable
from ..query.caching import MarkLedger
from ..usage import Usage

__all__ = ["History"]

Message = Dict[str, Any]


class History:
    """The messages of one Agent (callers that race hold the query's lock).

    No ``__slots__``: measured with bench/instructions.py, slots made every turn cost 4%
    more instructions (the loop reads ``messages`` and ``sendable`` several times a turn).
    """

    def __init__(self) -> None:
        self.messages: List[Message] = []
        self.sendable: List[Message] = []
        # The cache marks ``sendable`` carries, counted once per message for the life of
        # the conversation (a query's count must not walk the whole history again).
        self.marks = MarkLedger()
        self.last_usage = Usage()  # of the last reply: what compaction looks at

    def keep(self, message: Message) -> None:
        self.messages.append(message)
        self.sendable.append(sendable(message))

    def keep_all(self, messages: List[Message]) -> None:
        self.messages = list(messages)
        self.sendable = [sendable(m) for m in self.messages]

    def snapshot(self) -> List[Message]:
        return copy.deepcopy(self.messages)

    def note_usage(self, usage: Usage) -> None:
        """The last reply's usage: what compaction's threshold looks at."""
        self.last_usage = usage

    def forget_usage(self) -> None:
        """The history changed under the last usage (compacted, replaced)."""
        self.last_usage = Usage()
