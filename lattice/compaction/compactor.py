"""The ``Compactor``: what the loop talks to about compaction.

``between_turns()`` (the threshold check, SPEC 9) and ``recover(error)`` (overflow
recovery, once per query). It makes the summary call through the query's ``ModelCaller``
(raced, and billed to the query) and writes the new history through the query's
``commit``; what to cut and how to rebuild are ``rules.py``'s pure functions.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Callable, List, Optional

from ..errors import HistoryStoreError, PromptTooLongError
from ..messages import SystemMessage
from ..usage import Usage
from .rules import AutoCompact, Message, find_cut, rebuild, should_compact, summary_text
from .summary_request import summary_messages

if TYPE_CHECKING:  # pragma: no cover
    from ..conversation.store_link import StoreLink
    from ..query.model_call import ModelCaller
    from ..query.race import QueryRace

__all__ = ["Compactor", "BeforeReplace"]

log = logging.getLogger("lattice")

BeforeReplace = Callable[[List[Message], int, List[Message], Usage], None]


class Compactor:
    """Compaction and overflow recovery for one query.

    The summary call goes through the query's ``ModelCaller`` (raced against the query's
    signal, its usage billed to the query's). The new history goes through
    ``race.commit``: the store gets ``replace``, memory the new list, the consumer a
    ``SystemMessage("compaction")``.
    """

    __slots__ = ("policy", "link", "history", "race", "model", "recovered", "before_replace")

    def __init__(self, policy: Optional[AutoCompact], link: StoreLink, race: QueryRace,
                 model: ModelCaller, before_replace: Optional[BeforeReplace] = None) -> None:
        self.policy = policy
        self.link = link  # writes: the store first, then the history
        self.history = link.history
        self.race = race
        self.model = model
        self.recovered = False  # overflow recovery happens once per query
        # Told (old history, cut, new history, the summary's usage) before the store is
        # rewritten: a durable run's record follows (durable/record.py: Journal.compacted).
        self.before_replace = before_replace

    @classmethod
    def of(cls, policy: Optional[AutoCompact], link: StoreLink, race: QueryRace,
           model: ModelCaller, before_replace: Optional[BeforeReplace] = None) -> Compactor:
        """The query's compactor; without a policy, one that never compacts (shared: it
        has no state)."""
        if policy is None:
            return _NEVER
        return cls(policy, link, race, model, before_replace)

    def between_turns(self) -> bool:
        """Compact if the last reply's prompt size passed the threshold; True if it did.
        A failure (not of a ``fail_on_error`` store) is logged and skipped."""
        policy = self.policy
        if policy is None or not should_compact(policy, self.history.last_usage):
            return False
        try:
            return self.compact(policy)
        except HistoryStoreError:
            raise  # fail_on_error: the history stays uncompacted and the error propagates
        except Exception:
            log.warning("compaction failed; continuing without it", exc_info=True)
            self.history.forget_usage()  # try again after the next reply
            return False

    def recover(self, error: PromptTooLongError) -> None:
        """Overflow: compact so the loop can retry the turn, once per query; otherwise
        raise the original error."""
        policy = self.policy
        if policy is None or self.recovered:
            raise error
        self.recovered = True
        try:
            compacted = self.compact(policy)
        except HistoryStoreError:
            raise
        except Exception:
            raise error from None
        if not compacted:
            raise error

    def compact(self, policy: AutoCompact) -> bool:
        """Summarise all but the recent messages with one model call; False if there is
        nothing safe to summarise."""
        history, link = self.history, self.link
        messages = history.messages
        cut = find_cut(messages, policy.keep_recent_messages)
        if cut is None:
            return False
        model = self.model
        reply = model.call(model.summary_request(
            summary_messages(messages[:cut], policy.effective_prompt)))
        rebuilt = rebuild(summary_text(reply), messages[cut:])

        def keep() -> None:
            link.keep_all(rebuilt)
            history.forget_usage()

        def diverged() -> None:  # stored, but the query ended first: resynced next time
            link.mark_diverged()

        if self.before_replace is not None:
            self.before_replace(messages, cut, rebuilt, model.last_usage)
        item = SystemMessage("compaction", cut, model.last_usage)
        self.race.commit(partial(link.save, "replace", rebuilt), keep,
                        item if self.race.lockstep else None, late=diverged)
        return True


class _Never(Compactor):
    """``auto_compact`` off: nothing to compact, and an overflow is raised as it is."""

    __slots__ = ()

    def __init__(self) -> None:
        self.policy = None
        self.recovered = False

    def between_turns(self) -> bool:
        return False

    def recover(self, error: PromptTooLongError) -> None:
        raise error


_NEVER = _Never()
