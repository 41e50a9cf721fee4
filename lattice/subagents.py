"""Agents as tools (SPEC 22): ``Agent.as_tool()`` is a ``Tool`` whose handler runs a query
of the child agent (DESIGN-0.4 section 2: delegation is a tool that runs a query).

Everything the child gets from its parent comes through the call's ``ToolContext``: the
signal (an abort reaches the child's model request; an interrupt interrupts the child),
and ``Parentage``, handed to the child's query: the parent's usage counter (every child
request is added to it as it comes, so every budget above sees it), the budgets of every
query above, the tracer and the span of the call (the child's ``invoke_agent`` nests
under the parent's ``execute_tool``), the agents above (a cycle is a ``ValueError``), and
where to forward the child's messages when the parent's caller asked for them.

The loop knows about children in two places only (``Loop.batch``): a batch in which a
child paused for approval pauses the parent (``delegation.mark_paused``: the reply is
marked, the child's calls become the parent's with their ``path``; what the other calls
returned is kept on it), and a durable run keeps the children's usage with the batch's
results (its totals). ``delegation.split_decisions`` turns ``approvals=`` for the
children's calls back into decisions for the parent's batch and for each child.

Where a child's conversation lives: ``isolated=True`` makes a fresh conversation per call,
in a session derived from the child's store, else the parent's (``f"{session}/{call
id}"``), so that a durable child (``run_id=f"{parent_run_id}/{call id}"``) or a paused one
is found again by another process; without any store it lives in memory (a paused one is
kept on the tool until its approvals come). ``isolated=False`` uses the child Agent itself.
"""

from __future__ import annotations

import json
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .cancellation import AbortSignal
from .errors import AbortError, ConcurrentQueryError
from .messages import ResultMessage, text_of
from .options import check_bool
from .query.endings import Ending
from .stores.derived import derived_store
from .tools.definition import Tool, ToolCall, ToolContext, ToolResult, to_jsonable

# The child Agent: never imported here (agent.py imports this module), only used.
Agent = Any

if TYPE_CHECKING:  # pragma: no cover
    from .observe.observer import ObserverGroup
    from .query.model_call import ModelCaller
    from .query.race import QueryRace

__all__ = ["SubagentTool", "Parentage", "CycleError", "make_tool", "PROMPT_SCHEMA", "OUTPUTS"]

PROMPT_SCHEMA: Dict[str, Any] = {"type": "object", "properties": {"prompt": {"type": "string"}},
                                 "required": ["prompt"]}
OUTPUTS = ("result", "structured")
WAITING = "(waiting for approval)"  # a paused child's result: never stored, the loop pauses


class CycleError(ValueError):
    """An agent called as its own descendant: raised from the parent's query, not turned
    into a tool result (``tools.calls.execute_call`` lets it through)."""

    escapes_tools = True


class Parentage:
    """What a subagent's query gets from the call that runs it."""

    __slots__ = ("caller", "budgets", "observers", "trace", "ancestors", "forward")

    def __init__(self, caller: Optional[ModelCaller], budgets: List[Tuple[Any, ...]],
                 observers: Optional[ObserverGroup], trace: Any, ancestors: Tuple[Any, ...],
                 forward: bool) -> None:
        self.caller = caller  # the parent query's ModelCaller: usage flows up through it
        self.budgets = budgets  # every query above's (Loop.budgets_below: tokens, dollars)
        self.observers = observers  # the parent's: a child traces when its parent does
        self.trace = trace  # the token of the parent's tool span
        self.ancestors = ancestors  # the agents (templates) above, nearest last
        self.forward = forward  # the caller asked for the children's messages


def make_tool(agent: Agent, *, name: Optional[str], description: Optional[str],
              input_schema: Optional[Dict[str, Any]], output: str, isolated: bool,
              idempotent: Optional[bool]) -> SubagentTool:
    """``Agent.as_tool``'s checks and defaults (ValueError naming a bad option)."""
    if name is None:
        name = agent._settings.name
        if name is None:
            raise ValueError("as_tool() needs a name: give the child Agent a name= option, "
                             "or pass name= here")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty str, got {name!r}")
    if description is None:
        description = _first_line(agent._settings.system) or f"Ask the {name} agent."
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
    if output == "structured" and agent._settings.output is None:
        # else every call's result would be "null": the child has no structured_result
        raise ValueError("output='structured' needs a child Agent with an output_schema "
                         "(or output_format); this one has neither")
    check_bool("isolated", isolated)
    if idempotent is not None:
        check_bool("idempotent", idempotent)
    if idempotent is None:
        # A subagent call is idempotent when its child run is found again after a crash:
        # not for a shared child without a store (its conversation lives in its Agent, so a
        # new process's child would start over and repeat its tools): its interrupted call
        # is answered "uncertain" instead of being run again.
        idempotent = isolated or agent._conversation.link.home is not None
    return SubagentTool(agent, name, description,
                        PROMPT_SCHEMA if input_schema is None else input_schema, output,
                        isolated, idempotent)


def _first_line(system: Any) -> str:
    text = system if isinstance(system, str) else text_of(system)
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


class SubagentTool(Tool):
    """A ``Tool`` that runs a query of ``template`` (made by ``Agent.as_tool``)."""

    __slots__ = ("template", "output", "isolated", "prompt_field", "_shelf", "_shelf_lock")

    def __init__(self, template: Agent, name: str, description: str,
                 input_schema: Dict[str, Any], output: str, isolated: bool,
                 idempotent: bool) -> None:
        super().__init__(name, description, input_schema, self._handle, idempotent=idempotent)
        self.template = template
        self.output = output
        self.isolated = isolated
        # The default schema (given or not): the child's prompt is the prompt field.
        self.prompt_field = input_schema == PROMPT_SCHEMA
        # Paused children without a store, by call id, until their approvals come.
        self._shelf: Dict[str, Agent] = {}
        self._shelf_lock = threading.Lock()

    # -- one call -----------------------------------------------------------------------
    def _handle(self, args: Dict[str, Any], context: ToolContext) -> Any:
        call: Optional[ToolCall] = context._call
        loop = call.loop if call is not None else None
        above = loop.parentage.ancestors if loop is not None and loop.parentage else ()
        chain = above + (_template(context.agent),) if context.agent is not None else above
        if self.template in chain:
            names = [getattr(getattr(a, "_settings", None), "name", None) or "?"
                     for a in chain] + [self.name]
            raise CycleError(f"subagent cycle: {' -> '.join(names)} (an agent may not be its "
                             "own descendant)")
        call_id = context.tool_use_id
        prompt = args.get("prompt") if self.prompt_field else json.dumps(
            args, ensure_ascii=False, default=to_jsonable)
        decisions = loop.child_decisions.pop(call_id, None) if loop is not None else None
        agent = self._agent_for(loop, call_id, resuming=decisions is not None)
        parentage = Parentage(
            loop.model if loop is not None else None,
            loop.budgets_below() if loop is not None else [],
            loop.model.observers if loop is not None else None,
            call.trace if call is not None else None, chain,
            bool(loop is not None and loop.settings.include_subagent_messages
                 and loop.race.lockstep))
        if loop is not None:
            loop.delegated = True
        run_id = None
        if context.run_id is not None and _records_runs(agent):
            run_id = f"{context.run_id}/{call_id}"
        left = None
        if decisions is not None and not agent.pending_approvals():
            # Its decisions were being carried out when a crash came: the child's approvals
            # run is continued by its own run id (the journal settles the calls it began).
            decisions, left = None, _approvals_left_running(agent)
        try:
            if left is not None:
                query = agent._delegate(None, None, left, parentage, resuming=True)
            else:
                query = agent._delegate(prompt if decisions is None else None, decisions,
                                        None if decisions is not None else run_id, parentage)
        except ConcurrentQueryError:
            return ToolResult(f"The {self.name} agent is busy with another call (a shared "
                              "subagent runs one call at a time); try again later.",
                              is_error=True)
        # The parent's signal (abort, interrupt, its end) reaches the child's query at
        # once (started: an interrupt applies to it; a fired signal ends it right here).
        relay = partial(_relay, context.signal, query._race, loop)
        context.signal.add_callback(relay)
        try:
            result = self._result_of(query, call_id, loop if parentage.forward else None)
        except Exception as exc:
            if getattr(exc, "escapes_tools", False):
                raise
            return ToolResult(f"The {self.name} agent failed: {type(exc).__name__}: {exc}",
                              is_error=True)
        finally:
            context.signal.remove_callback(relay)
        if result.replayed and parentage.caller is not None:
            parentage.caller.add_child(result.usage)  # what the ended child run spent
        return self._answer(result, agent, call_id, loop)

    def _result_of(self, query: Any, call_id: str, loop: Any) -> ResultMessage:
        """The child's query to its end; its messages handed to the parent's caller when
        it asked for them (each with the id of the call that ran its agent)."""
        if loop is None:
            return query.result()  # type: ignore[no-any-return]
        emit = loop.race.emit
        result: Optional[ResultMessage] = None
        for item in query:
            if isinstance(item, ResultMessage):
                result = item
                continue
            if item.parent_tool_use_id is None:
                item.parent_tool_use_id = call_id
            emit(item)
        assert result is not None
        return result

    def _answer(self, result: ResultMessage, agent: Agent, call_id: str, loop: Any) -> Any:
        if result.subtype == "awaiting_approval":
            if loop is None:
                return ToolResult(f"The {self.name} agent is waiting for approval of "
                                  f"{[c.name for c in result.pending_approvals]}.",
                                  is_error=True)
            loop.paused[call_id] = list(result.pending_approvals)
            if self.isolated and agent._conversation.link.home is None:
                with self._shelf_lock:
                    self._shelf[call_id] = agent
            return ToolResult(WAITING)
        if result.subtype != "success":
            why = f": {result.error}" if result.error is not None else ""
            if result.subtype == "error_timeout":
                why = f" (the model request timed out){why}"
            return ToolResult(f"The {self.name} agent ended with {result.subtype}{why}.",
                              is_error=True)
        if self.output == "structured":
            return json.dumps(to_jsonable(result.structured_result) if not isinstance(
                result.structured_result, (dict, list, str, int, float, bool, type(None)))
                else result.structured_result, ensure_ascii=False)
        return result.result or ""

    def _agent_for(self, loop: Any, call_id: str, *, resuming: bool) -> Agent:
        """The conversation this call runs on (see the module docstring)."""
        template = self.template
        if not self.isolated:
            return template
        if resuming:
            with self._shelf_lock:
                kept = self._shelf.pop(call_id, None)
            if kept is not None:
                return kept
        home = template._conversation.link.home
        if home is None and loop is not None:
            home = loop.link.home
        store = derived_store(home, call_id) if home is not None else None
        return template._fork(store)


def _template(agent: Any) -> Any:
    return getattr(agent, "_template", None) or agent


def _approvals_left_running(agent: Agent) -> Optional[str]:
    """The run id of the approvals query a crash left running on the child's
    conversation (None when there is none)."""
    from .durable.runs import running_runs

    for record in running_runs(agent._conversation.link):
        if record.run_id.startswith("approval:"):
            return record.run_id
    return None


def _records_runs(agent: Agent) -> bool:
    return bool(agent._conversation.link.caps.records_runs)


def _relay(signal: AbortSignal, race: QueryRace, loop: Any) -> None:
    """The parent's signal fired: an interrupt interrupts the child; anything else (an
    abort, the parent ending) ends it ``error_abort`` with the same reason."""
    if loop is not None and loop.race.interrupted:
        race.interrupt()
        return
    reason = signal.reason
    race.end(Ending("error_abort", error=reason if isinstance(reason, AbortError) else
                   AbortError(str(reason) if reason is not None else "aborted")))
