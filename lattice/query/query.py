"""A query's start and end, on the caller's side: the one-query guard, the store's session
lock, approvals, the worker, the repair of the history's tail and the ``ResultMessage``.

``Query`` is what ``Agent.query()`` returns. It talks to the Agent's ``Conversation``
(conversation/conversation.py: history, loader, guard, lock wait), never to the Agent
itself. The query starts when it is made (the guard is taken, so ``interrupt()`` applies
from then on); the prompt enters the history and the worker starts at the first
``next()``. Closing or dropping it ends the query however far it got; one never advanced
leaves the history as it was. Every way out goes through ``_finish``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Generator, Iterator, List, Optional, Tuple

from ..cancellation import AbortSignal
from ..conversation.conversation import Conversation
from ..durable.record import RunRecord
from ..durable.runs import DurableRun, durable_run
from ..messages import (
    ResultMessage,
    SDKMessage,
    UserMessage,
    pending_tail,
    tool_uses_of,
    unanswered_tool_uses,
)
from ..observe.observer import ObserverGroup, QueryDetails, describing
from ..stores.repair import repair_history
from ..stores.session import SessionHold
from ..tools import approval
from ..tools.calls import resolve_calls
from ..tools.definition import ToolCall
from ..tools.delegation import child_calls, split_decisions
from .endings import Ending
from .handoff import Stopped
from .inline import ToolRunner, runs_inline, tools_need_a_thread
from .loop import Loop
from .settings import QuerySettings

__all__ = ["Query"]


class Query(Iterator[SDKMessage]):
    """One running query, as an iterator of SDK messages (``ResultMessage`` last).

    Made by ``Agent.query()`` (and ``Agent.prompt()``, which runs it to its end).
    """

    def __init__(self, conversation: Conversation, settings: QuerySettings, prompt: Any,
                 approvals: Optional[Dict[str, Any]], signal: Optional[AbortSignal], *,
                 lockstep: bool, owner: Any = None, run_id: Optional[str] = None,
                 parentage: Any = None, elicitation: Optional[Dict[str, Any]] = None) -> None:
        self._conversation = conversation
        self._parentage = parentage  # a subagent's query: what its parent's call lends it
        self._race = conversation.start(signal, lockstep=lockstep)
        self._durable: DurableRun  # set below: where a run is recorded and resumed
        self._owner = owner  # the Agent: only handed to tools (ToolContext.agent)
        self._prompt = prompt
        self._approvals = approvals
        self._elicitation = elicitation  # answers to MCP servers' questions (SPEC 23)
        self._settings = settings
        self._steps: Optional[Generator[SDKMessage, None, None]] = None
        self._done = False
        self._lock: Optional[SessionHold] = None
        self._loop: Optional[Loop] = None
        self._observers: Optional[ObserverGroup] = None
        self._token: Any = None
        self._started = 0.0
        self._tail_done = False
        try:
            # where a run is recorded and resumed (a bad run id or prompt fails here)
            self._durable = durable_run(conversation.link, run_id, prompt)
            if approvals is not None:  # bad approvals fail here, before a web app answers
                self._check_approvals()
            if elicitation is not None:  # and bad answers
                self._check_answers()
        except BaseException:
            self._finish(Ending("closed"), delivered=False)
            raise

    def __iter__(self) -> Iterator[SDKMessage]:
        """The messages themselves (a ``for`` loop steps the generator without this
        object's ``__next__`` in between: a Python call fewer per message)."""
        if self._steps is None:
            if self._done:
                return iter(())
            self._steps = self._run_query()
        return self._steps

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
            self._finish(Ending("closed"), delivered=False)

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

    def _details(self) -> QueryDetails:
        """Who runs this query and where it talks, for observers (tracing)."""
        owner = self._owner
        session = getattr(self._conversation.link.home, "session_id", None)  # the store's
        run_id = self._durable.run_id if self._durable is not None else None
        address, port = getattr(owner, "_server", (None, None))
        provider = None
        parentage = self._parentage
        caller = parentage.caller if parentage is not None else None
        if caller is not None and caller.settings.client is not self._settings.client:
            provider = getattr(owner, "_provider", None)  # the child's, not the tracer's
        return QueryDetails(getattr(owner, "name", None), getattr(owner, "_agent_id", None),
                            session if isinstance(session, str) else run_id, address, port,
                            provider)

    # -- the query -------------------------------------------------------------------------
    def _run_query(self) -> Generator[SDKMessage, None, None]:
        race, settings, conversation = self._race, self._settings, self._conversation
        durable = self._durable
        try:
            ended = durable.replay()
            taken = True
            if ended is None:
                taken = self._take_session(durable)
                if taken and conversation.link.home is not None:
                    ended = durable.under_lock(self._approving())
            if ended is not None:  # the run had ended: its result again, nothing else
                self._finish(Ending("closed"), delivered=False)
                yield self._replay(ended)
                return
            parentage = self._parentage
            if parentage is not None and parentage.observers is not None:
                # A child traces when its parent does, its span under the parent's call's.
                self._observers = parentage.observers
                with describing(self._details()):
                    self._token = self._observers.agent_start(
                        settings.model, self._prompt, name=settings.name,
                        parent=parentage.trace)
            elif settings.observers:
                self._observers = ObserverGroup(settings.observers)
                with describing(self._details()):
                    self._token = self._observers.query_start(settings.model, self._prompt)
            self._started = time.monotonic()
            resume = self._begin() if taken else None
            # a resumed run counts the replies it stored before (durable.turns, .usage)
            self._loop = Loop(race, settings, conversation.link, agent=self._owner,
                              observers=self._observers, query_token=self._token,
                              resume=resume, journal=durable.journal, turns=durable.turns,
                              usage=durable.usage, parentage=parentage)
            if parentage is not None and parentage.caller is not None and durable.turns:
                parentage.caller.add_child(durable.usage)  # a resumed child's, up to its parent
            threaded = tools_need_a_thread(race, parentage)
            if runs_inline(race, settings, conversation.link, resume, threaded):
                race.go_inline(ToolRunner(race) if threaded else None)
                try:  # as the worker does (Loop.__call__), on this thread
                    last = yield from self._loop.inline()
                except Stopped:
                    pass  # the race was lost: the query has its ending
                except GeneratorExit:
                    raise
                except BaseException as exc:  # noqa: B036 - raised with the result
                    race.end(Ending.raised(exc))
                else:
                    race.end(last)
            else:
                threading.Thread(target=self._loop, name="lattice-query", daemon=True).start()
                while True:
                    item = race.next_item()
                    if item is None:
                        break
                    yield item
            ending = race.ended
            assert ending is not None
            repair = self._repair_tail(ending)
            if repair is not None and race.lockstep:
                yield UserMessage(repair)  # copies when read
            result = self._finish(ending)
            assert result is not None
            yield result
        finally:
            if not self._done:  # closed, dropped, or an exception (e.g. Ctrl-C) in here
                race.end(Ending("closed"))  # a no-op if the query had ended
                assert race.ended is not None
                self._finish(race.ended, delivered=False)

    def _finish(self, ending: Ending, *, delivered: bool = True) -> Optional[ResultMessage]:
        """The one end of every query, however it ends: the tail repaired, the result made
        (None when nobody will receive it: the caller closed the query, or an exception
        is on its way out; a ``raised`` ending raises its error here), observers told,
        the session lock and the guard given back."""
        self._done = True
        result: Optional[ResultMessage] = None
        try:
            loop = self._loop
            if loop is not None:
                self._repair_tail(ending)
                if delivered and ending.subtype != "closed":
                    last = loop.last_reply
                    durable = self._durable
                    result = ending.to_result(
                        last_text=loop.last_text, usage=loop.usage,
                        stop_reason=last.get("stop_reason") if last else None,
                        num_turns=loop.turns,
                        duration_ms=int((time.monotonic() - self._started) * 1000),
                        run_id=durable.run_id)
                    result._priced_by(loop.settings.prices, loop.settings.model)
                    durable.end(result)
        finally:
            try:
                if self._observers is not None:
                    self._observers.query_end(self._token, result,
                                              result.error if result else ending.error)
            finally:
                self._conversation.end(self._lock)
        return result

    def _take_session(self, durable: DurableRun) -> bool:
        """The store's session lock, and the history caught up with the store (nothing to
        do without a store). False if the query ended while this Agent's own last write
        was still landing: then it writes nothing, and the loop ends at its first check.
        A durable run never runs without the lock (SPEC 21b: a store failure raises)."""
        conversation = self._conversation
        if conversation.link.home is None:
            return True
        self._lock = conversation.hold_session(self._race, strict=durable.run_id is not None)
        if self._lock is None:
            return False
        conversation.catch_up()
        return True

    def _check_approvals(self) -> List[ToolCall]:
        assert self._approvals is not None
        pending = self._conversation.pending_calls(self._settings, self._owner)
        approval.check_decisions([c.id for c in pending], self._approvals)
        return pending

    def _check_answers(self) -> Tuple[Dict[str, Any], Any]:
        """The decisions and answers for a query resumed with ``elicitation=``
        (ValueError when they do not answer the questions waiting)."""
        from ..mcp._pending import resume_batch

        assert self._elicitation is not None
        self._conversation.ensure_loaded()
        tail = pending_tail(self._conversation.history.messages)
        return resume_batch(tail or {}, self._elicitation)

    def _pending(self, ids: List[str]) -> List[ToolCall]:
        """The ``ToolCall``s of the paused tail with these ids (a replayed result's)."""
        tail = pending_tail(self._conversation.history.messages)
        if tail is None:
            return []
        calls = resolve_calls(tool_uses_of(tail["content"]), self._settings.tools,
                              AbortSignal(), self._owner)
        calls += child_calls(tail, self._settings.tools, self._owner)
        return [c for c in calls if c.id in ids]

    def _approving(self) -> Optional[Dict[str, Any]]:
        """The paused reply this query resumes with approvals (None: not such a query)."""
        if self._approvals is None and self._elicitation is None:
            return None
        return pending_tail(self._conversation.history.messages)

    def _replay(self, record: RunRecord) -> ResultMessage:
        """An ended run's recorded result, again (SPEC 17)."""
        return record.replay(self._settings.output, self._settings.tools, self._pending)

    def _begin(self) -> Optional[Dict[str, Any]]:
        """Put the prompt in the history; settle calls that wait for approval; continue a
        durable run left running."""
        prompt, approvals, durable = self._prompt, self._approvals, self._durable
        history, link = self._conversation.history, self._conversation.link
        if durable.resumes and approvals is None and self._elicitation is None:
            return durable.resume(self._settings, self._owner)
        tail = pending_tail(history.messages)
        if self._elicitation is not None:  # the calls that waited for input are made again
            decisions, answers = self._check_answers()  # again, under the session lock
            assert tail is not None
            calls = resolve_calls(tool_uses_of(tail["content"]), self._settings.tools,
                                  AbortSignal(), self._owner)
            decisions = durable.approve(tail, decisions,
                                        [c for c in calls if c.id not in decisions])
            return {"reply": tail, "decisions": decisions, "prompt": prompt,
                    "answers": answers}
        if approvals is not None:
            self._check_approvals()  # again, under the session lock
            assert tail is not None
            # Decisions for waiting subagents' calls go to them; their calls run again.
            decisions, children = split_decisions(tail, approvals)
            calls = resolve_calls(tool_uses_of(tail["content"]), self._settings.tools,
                                  AbortSignal(), self._owner)
            decisions = durable.approve(tail, decisions, [
                c for c in calls if c.id not in decisions], children)
            return {"reply": tail, "decisions": decisions, "prompt": prompt,
                    "children": children}
        if tail is not None:  # the user moved on: answer the pending calls first
            link.append(approval.moved_on(tail))
        elif unanswered_tool_uses(history.messages):  # e.g. a store failed mid-batch
            messages, _ = repair_history(history.messages)
            for message in messages[len(history.messages):]:
                link.append(message)
        # a durable run is recorded before (or with) its prompt
        durable.start({"role": "user", "content": prompt})
        return None

    def _repair_tail(self, ending: Ending) -> Optional[Dict[str, Any]]:
        """Answer the calls of an unanswered last reply, so the history stays sendable
        (a reply waiting for approval stays as it is). Once per query."""
        if self._tail_done:
            return None
        self._tail_done = True
        if ending.subtype in ("awaiting_approval", "awaiting_input"):
            return None
        history, link = self._conversation.history, self._conversation.link
        # The query has ended: the worker can no longer change the history (QueryRace.commit).
        uses = unanswered_tool_uses(history.messages)
        if not uses:
            return None
        message = {"role": "user", "content": self._race.unanswered(uses, ending.traits.why)}
        history.keep(message)
        link.save_later("append", message)  # never holds up the end (SPEC 10a)
        return message
