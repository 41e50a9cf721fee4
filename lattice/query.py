"""A query's start and end, on the caller's side: the one-query guard, the store's session
lock, approvals, the worker, the repair of the history's tail and the ``ResultMessage``.

``Query`` is what ``Agent.query()`` returns. The query starts when it is made (the guard
is taken, so ``interrupt()`` applies from then on); the prompt enters the history and the
worker starts at the first ``next()``. Closing or dropping it ends the query however far
it got; one never advanced leaves the history as it was.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Generator, Iterator, List, Optional

from .calls import not_run
from .endings import Ending
from .errors import ConcurrentQueryError
from .loop import Loop
from .messages import (
    ResultMessage,
    SDKMessage,
    UserMessage,
    pending_tail,
    tool_uses_of,
    unanswered_tool_uses,
)
from .observe import ObserverGroup
from .race import QueryRun
from .settings import QuerySettings
from .tools import ToolResult

if TYPE_CHECKING:  # pragma: no cover
    from .agent import Agent
    from .cancellation import AbortSignal

__all__ = ["Query"]

log = logging.getLogger("lattice")


def check_approvals(agent: Agent, approvals: Dict[str, Any]) -> None:
    """``approvals`` must answer exactly the calls waiting for approval (ValueError)."""
    pending = [c.id for c in agent.pending_approvals()]
    if not pending:
        raise ValueError("approvals= given, but no tool call is waiting for approval")
    missing = [i for i in pending if i not in approvals]
    unknown = [i for i in approvals if i not in pending]
    if missing or unknown:
        raise ValueError(f"approvals must answer exactly the pending calls: missing "
                         f"{missing}, unknown {unknown}")
    for key, decision in approvals.items():
        if not isinstance(decision, (bool, str, ToolResult)):
            raise ValueError(f"approvals[{key!r}] must be True, False, a str or a "
                             f"ToolResult, got {decision!r}")


class Query(Iterator[SDKMessage]):
    """One running query, as an iterator of SDK messages (``ResultMessage`` last)."""

    def __init__(self, agent: Agent, prompt: Any, approvals: Optional[Dict[str, Any]],
                 settings: QuerySettings, signal: Optional[AbortSignal], *,
                 lockstep: bool) -> None:
        if not agent._guard.acquire(blocking=False):
            raise ConcurrentQueryError("this Agent is already running a query; create one "
                                       "Agent per conversation")
        self._agent = agent
        if approvals is not None:  # bad approvals fail here, before a web app answers
            try:
                check_approvals(agent, approvals)
            except BaseException:
                agent._guard.release()
                raise
        self._prompt = prompt
        self._approvals = approvals
        self._settings = settings
        self._run = QueryRun(signal, lockstep=lockstep)
        agent._run = self._run
        self._steps: Optional[Generator[SDKMessage, None, None]] = None
        self._done = False

    def __next__(self) -> SDKMessage:
        if self._steps is None:
            if self._done:
                raise StopIteration
            self._steps = self._run_query()
        return next(self._steps)

    def close(self) -> None:
        """End the query (the history keeps every completed step, and stays sendable)."""
        if self._steps is not None:
            self._steps.close()
        elif not self._done:
            self._done = True
            self._release(None)

    def __del__(self) -> None:
        if getattr(self, "_done", True):  # ended (the usual case), or never made
            return
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def result(self) -> ResultMessage:
        """Run to the end and return the ``ResultMessage`` (``prompt()``)."""
        if self._steps is None and not self._done:
            self._steps = self._run_query()
        last: Any = None
        for last in self._steps or ():  # noqa: B007 - the generator itself, not __next__
            pass
        assert isinstance(last, ResultMessage)
        return last

    # -- the query -------------------------------------------------------------------------
    def _run_query(self) -> Generator[SDKMessage, None, None]:
        agent, run, settings = self._agent, self._run, self._settings
        history = agent._history
        lock: Any = None
        observers: Optional[ObserverGroup] = None
        token: Any = None
        released = False
        started = time.monotonic()
        loop: Optional[Loop] = None
        try:
            if settings.observers:
                observers = ObserverGroup(settings.observers)
                token = observers.query_start(settings.model, self._prompt)
            if history.store is not None:
                lock = self._take_lock()
                agent._ensure_loaded(again=history.stale())
            resume = self._begin()
            loop = Loop(run, settings, history, agent=agent, observers=observers,
                        query_token=token, resume=resume)
            threading.Thread(target=loop, name="lattice-query", daemon=True).start()
            while True:
                item = run.next_item()
                if item is None:
                    break
                yield item
            ending = run.ended
            assert ending is not None
            repair = self._repair_tail(ending)
            if repair is not None and run.lockstep:
                yield UserMessage(repair)  # copies when read
            last = loop.last_reply
            result = ending.to_result(
                last_text=loop.last_text, usage=loop.usage,
                stop_reason=last.get("stop_reason") if last else None, num_turns=loop.turns,
                duration_ms=int((time.monotonic() - started) * 1000))
            if observers is not None:
                observers.query_end(token, result, result.error)
            released = True
            self._release(lock)
            yield result
        finally:
            if not released:
                try:
                    if run.ended is None:
                        run.end(Ending("closed"))
                    if loop is not None:
                        self._repair_tail(run.ended)
                finally:
                    if observers is not None:
                        error = run.ended.error if run.ended is not None else None
                        observers.query_end(token, None, error)
                    self._release(lock)

    def _take_lock(self) -> Any:
        """The store's session lock (SPEC 14), held until the query ends."""
        from .stores.session import hold_session

        return hold_session(self._agent._history.store, self._agent._lock_wait_s)

    def _begin(self) -> Optional[Dict[str, Any]]:
        """Put the prompt in the history; settle calls that wait for approval."""
        agent, prompt, approvals = self._agent, self._prompt, self._approvals
        history = agent._history
        tail = pending_tail(history.messages)
        if approvals is not None:
            check_approvals(agent, approvals)  # again, under the session lock
            return {"reply": tail, "decisions": dict(approvals), "prompt": prompt}
        if tail is not None:  # the user moved on: answer the pending calls first
            history.append({"role": "user", "content": [
                not_run(u.get("id", ""), "moved_on") for u in tool_uses_of(tail["content"])]})
        elif unanswered_tool_uses(history.messages):  # e.g. a store failed mid-batch
            from .stores import repair_history

            messages, _ = repair_history(history.messages)
            for message in messages[len(history.messages):]:
                history.append(message)
        history.append({"role": "user", "content": prompt})
        return None

    def _repair_tail(self, ending: Optional[Ending]) -> Optional[Dict[str, Any]]:
        """Answer the calls of an unanswered last reply, so the history stays sendable
        (a reply waiting for approval stays as it is)."""
        run, history = self._run, self._agent._history
        if ending is None or ending.subtype == "awaiting_approval":
            return None
        with run.cond:  # the query has ended: the worker can no longer write
            uses = unanswered_tool_uses(history.messages)
            if not uses:
                return None
            why = ending.kind.why
            blocks: List[Dict[str, Any]] = []
            for use in uses:
                use_id = use.get("id", "")
                done = run.partial.get(use_id)
                if done is None:
                    done = not_run(use_id, "cut" if use_id in run.started else "ended",
                                   why=why)
                blocks.append(done)
            message = {"role": "user", "content": blocks}
            history.keep(message)
        history.save_later("append", message)  # never holds up the end (SPEC 10a)
        return message

    def _release(self, lock: Any) -> None:
        agent = self._agent
        try:
            self._run.release()
            if lock is not None:  # once a store write still in flight has landed
                self._run.after_writes(lock.release)
        finally:  # even if a KeyboardInterrupt lands above
            self._done = True
            agent._run = None
            agent._guard.release()

