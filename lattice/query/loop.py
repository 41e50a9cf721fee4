"""One query's loop, run by the worker thread: the decisions, and only those.

``loop()`` is a ``while`` over ``step()``: check the race, check the limits, compact if
due, ask the model, then either end (a final answer) or run the tools and go on. Each
question is answered by its own object:

- the model request (building, the caller's hook, observers, the race): ``model_call.py``;
- the output contract (``submit_output`` / ``output_format``): ``output.OutputContract``;
- compaction and overflow recovery: ``compaction.Compactor``;
- approval (does a batch wait? what did a person decide?): ``tools/approval.py``;
- one tool call, and a batch of them: ``tools/calls.py``.

The loop returns how the query ends as an ``Ending``; a race it loses (abort, deadline,
interrupt during a model call, the consumer closing) surfaces as ``Stopped`` from the
``QueryRace``. It reads and writes the conversation only through ``History`` and the run's
``commit``; it never touches the Agent.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Dict, Generator, List, Optional

from ..compaction.compactor import Compactor
from ..conversation.store_link import StoreLink
from ..cost import cost_usd, warn_unchecked
from ..durable.journal import NO_JOURNAL, Journal, Ride
from ..errors import BudgetExceededError, MaxTurnsExceededError, PromptTooLongError
from ..messages import AssistantMessage, UserMessage, text_of, tool_uses_of
from ..models.base import MALFORMED_CALL
from ..observe.observer import ObserverGroup
from ..tools import approval
from ..tools.calls import Hooks, Outcome, execute_batch, not_run, resolve_calls
from ..tools.definition import ToolCall
from ..tools.delegation import mark_paused
from ..usage import Usage
from .endings import Ending
from .model_call import ModelCaller
from .output import OutputContract, Verdict
from .race import QueryRace, Stopped
from .settings import QuerySettings

__all__ = ["Loop"]


CONTEXT_EXCEEDED = "model_context_window_exceeded"
# A MALFORMED_CALL reply (models/base.py) has no call to answer: the model is asked to call
# again (SPEC 25a), a turn like any other (counted by max_turns).
MALFORMED_TEXT = ("Your function call was malformed and was not run. Call the function again "
                  "with valid arguments (a JSON object matching its schema).")

# What a reply asks for (``Loop.plan``): the final answer, its batch run, calls cut off at
# max_tokens, a submit_output, a person's approval, or a malformed call made again.
ANSWER, TOOLS, TRUNCATED, SUBMIT, WAIT = "answer", "run", "truncated", "submit", "wait"
AGAIN = "again"


def over_budget(budget: Any) -> Optional[Ending]:
    """One budget's ending once spent: ``(max_budget_tokens, caller)`` or
    ``(max_cost_usd, caller, prices, model)`` (``Loop.budgets_below``)."""
    limit, usage = budget[0], budget[1].usage
    if len(budget) == 4:  # a max_cost_usd
        dollars = cost_usd(usage, budget[2], budget[3])
        if dollars is not None and dollars >= limit:  # None: that query warns
            return Ending("error_max_budget", error=BudgetExceededError(
                f"spent ${dollars:.6f}, max_cost_usd={limit}"))
        return None
    spent = usage.prompt_tokens + usage.output_tokens
    if spent >= limit:
        return Ending("error_max_budget", error=BudgetExceededError(
            f"used {spent} tokens, max_budget_tokens={limit}"))
    return None


class Loop:
    """One query's loop. ``__call__`` is the worker thread's target."""

    def __init__(self, race: QueryRace, settings: QuerySettings, link: StoreLink, *,
                 agent: Any = None, observers: Optional[ObserverGroup] = None,
                 query_token: Any = None, resume: Optional[Dict[str, Any]] = None,
                 journal: Journal = NO_JOURNAL, turns: int = 0,
                 usage: Optional[Usage] = None, parentage: Any = None) -> None:
        self.race = race
        self.settings = settings
        self.link = link  # writes: the store first, then the history
        self.history = link.history
        self.agent = agent  # only handed to tools, in ToolContext
        # approvals, or a durable run resumed: {"reply": ..., "decisions": ..., "prompt": ...}
        # or {"reply": ..., "final": True} (a stored last reply ends the run) or {"ending": ...}
        self.resume = resume
        self.journal = journal  # a durable run's call journal (durable/journal.py)
        self.model = ModelCaller(race, settings, self.history, observers, query_token, usage)
        self.output = OutputContract.of(settings.output, settings.output_native,
                                        settings.max_output_retries)
        self.compactor = Compactor.of(settings.auto_compact, link, race, self.model,
                                      journal.compacted)
        self.gate = approval.Gate(settings)
        self.hooks = Hooks(settings.before_tool_call, settings.after_tool_call)
        self.watch = partial(observers.watch_tool, query_token) if observers else None
        self.turns = turns  # model replies of the run (a resumed run's earlier ones too)
        self.last_reply: Optional[Dict[str, Any]] = None
        self.asks = ANSWER  # what the last reply asks for (``plan``)
        self.uses: List[Dict[str, Any]] = []  # its tool_use blocks
        self.calls: List[ToolCall] = []  # its batch
        self.waiting: List[ToolCall] = []  # the calls of it that wait for approval
        # Subagents (SPEC 22; subagents.py): what this query got from the call running it
        # (None for a top query), the children of this batch that paused for approval, the
        # decisions for paused children resumed by approvals, whether a child ran.
        self.parentage = parentage
        self.paused: Dict[str, List[ToolCall]] = {}
        self.child_decisions: Dict[str, Dict[str, Any]] = {}
        self.delegated = False
        # MCP elicitation (SPEC 23): the questions this batch's calls left for the user, by
        # call id (the query ends awaiting_input), and the answers a resumed query brought.
        self.elicited: Dict[str, List[Any]] = {}
        self.elicitation_answers: Dict[str, List[Any]] = {}
        if parentage is not None and parentage.caller is not None:
            self.model.up = parentage.caller.add_child
        if journal is not NO_JOURNAL:  # a durable run keeps its children's usage (totals)
            self.model.children = Usage()

    def __call__(self) -> None:
        self.race.worker_enter()
        try:
            ending = self.loop()
        except Stopped:
            return
        except BaseException as exc:  # noqa: B036 - handed to the consumer to raise
            ending = Ending.raised(exc)
        finally:
            self.race.worker_exit()
        self.race.end(ending)

    def loop(self) -> Ending:
        ending = self.resume_batch() if self.resume is not None else None
        while ending is None:
            ending = self.step()
        return ending

    def step(self) -> Optional[Ending]:
        """One turn: limits, compaction, a model request, then its answer or its tools."""
        limit = self.prelude()
        if limit is not None:
            return limit
        reply = self.next_reply()
        if reply is None:
            return None  # overflow recovered: the turn is tried again
        self.race.check()  # what the consumer did while holding the reply comes first
        return self.act(reply)

    def prelude(self) -> Optional[Ending]:
        """Before a model request: the race, the lock, the limits, compaction if due."""
        self.race.check()
        self.link.check_hold()  # a lock found taken over ends the query here (SPEC 18)
        limit = self.limit()
        if limit is None and self.compactor.between_turns():
            limit = self.limit()  # the summary may have spent the budget
        return limit

    def inline(self) -> Generator[Any, None, Ending]:
        """``loop()`` on the consumer's thread (lattice/query/inline.py): the same turns,
        each message yielded where the worker would stop for the consumer (after the
        reply; after the answer to it), so what the consumer does while holding it still
        comes first. Only for a query ``runs_inline`` allows: no compaction or resumed
        batch (each yields mid-turn), batches on the race's tool thread."""
        stash = self.race.stash
        assert stash is not None and self.resume is None
        while True:
            ending = self.prelude()
            if ending is not None:
                return ending
            reply = self.next_reply()
            while stash:
                yield stash.popleft()
            if reply is None:
                continue
            self.race.check()  # what the consumer did while holding the reply comes first
            ending = self.act(reply)
            while stash:
                yield stash.popleft()
            if ending is not None:
                return ending

    def limit(self) -> Optional[Ending]:
        """``max_turns``, ``max_budget_tokens`` and ``max_cost_usd``, checked before each
        model request."""
        s = self.settings
        if self.turns >= s.max_turns:
            return Ending("error_max_turns", error=MaxTurnsExceededError(
                f"reached max_turns={s.max_turns} model requests"))
        # no list built per turn: this query's token budget, then those above (a subagent)
        if s.max_budget_tokens is not None:
            ending = over_budget((s.max_budget_tokens, self.model))
            if ending is not None:
                return ending
        if self.parentage is not None:
            for budget in self.parentage.budgets:
                ending = over_budget(budget)
                if ending is not None:
                    return ending
        if s.max_cost_usd is not None:  # like the token budget, in dollars (cost.py)
            usage = self.model.usage
            dollars = cost_usd(usage, s.prices, s.model)
            if dollars is None:  # a model without a price: not guessed, but said
                warn_unchecked(usage, s.max_cost_usd, s.prices, s.model)
            elif dollars >= s.max_cost_usd:
                return Ending("error_max_budget", error=BudgetExceededError(
                    f"spent ${dollars:.6f}, max_cost_usd={s.max_cost_usd}"))
        return None

    def budgets_below(self) -> List[Any]:
        """The budgets a subagent of this query works within: this query's and those
        above it, with the usage counters they are checked against: ``(max_budget_tokens,
        caller)`` and ``(max_cost_usd, caller, prices, model)``."""
        s = self.settings
        mine: List[Any] = [(s.max_budget_tokens, self.model)] \
            if s.max_budget_tokens is not None else []
        if s.max_cost_usd is not None:  # the children's requests count in dollars too
            mine.append((s.max_cost_usd, self.model, s.prices, s.model))
        return mine + (self.parentage.budgets if self.parentage is not None else [])

    @property
    def usage(self) -> Usage:
        """What the query's model calls used so far (the summaries' too)."""
        return self.model.usage

    def last_text(self) -> Optional[str]:
        return text_of(self.last_reply["content"]) if self.last_reply is not None else None

    # -- the model ---------------------------------------------------------------------------
    def next_reply(self) -> Optional[Dict[str, Any]]:
        """The next reply, in the history and yielded; None after an overflow recovery."""
        self.turns += 1
        try:
            reply = self.model.call(self.model.request())
            if reply.get("stop_reason") == CONTEXT_EXCEEDED:  # discarded (billed all the same)
                raise PromptTooLongError(
                    f"the model stopped with stop_reason {CONTEXT_EXCEEDED!r}")
        except PromptTooLongError as exc:
            self.compactor.recover(exc)
            return None
        self.plan(reply)
        self.write(reply, AssistantMessage,
                   self.journal.ride(self.calls if self.asks is TOOLS else (), self.race.lockstep))
        self.last_reply = reply
        self.history.note_usage(self.model.last_usage)
        return reply

    # -- writing ---------------------------------------------------------------------------
    def write(self, message: Dict[str, Any], cls: Any = None,
              ride: Optional[Ride] = None) -> None:
        """Append ``message`` (store first, then memory) and yield it as ``cls`` (which
        copies when read, so a consumer's edits never reach the history); with ``ride``
        (the journal's, ``Journal.ride``), the journal in the same store write."""
        history, link = self.history, self.link
        save = None
        if link.store is not None:
            save = partial(link.save, "append", message) if ride is None else \
                partial(link.save, ride[0], message, *ride[1:])
        item = cls(message) if self.race.lockstep and cls is not None else None
        self.race.commit(save, partial(history.keep, message), item, late=self.diverged)

    def diverged(self) -> None:
        """Stored, but the query ended first: the next store operation resyncs it."""
        self.link.mark_diverged()

    def decide(self, verdict: Verdict) -> Optional[Ending]:
        """Act on the output contract's answer: feed back, end, or both."""
        if verdict.feed is not None:
            self.write({"role": "user", "content": verdict.feed}, UserMessage)
        return verdict.end

    # -- tools -----------------------------------------------------------------------------
    def plan(self, reply: Dict[str, Any]) -> None:
        """What kind of turn the reply makes (``asks``), its batch (``calls``) and those of
        its calls that wait for approval (``waiting``: they mark the reply before it is
        written)."""
        uses = self.uses = tool_uses_of(reply["content"])
        self.calls = self.waiting = []  # replaced when the reply asks for tools
        if not uses:
            self.asks = AGAIN if reply.get("stop_reason") == MALFORMED_CALL else ANSWER
        elif reply.get("stop_reason") == "max_tokens":
            self.asks = TRUNCATED
        elif self.output.submits(uses):
            self.asks = SUBMIT
        else:
            self.calls = resolve_calls(uses, self.settings.tools, self.race.controller.signal,
                                       self.agent, self)
            self.waiting = self.gate.waiting(self.calls)
            self.asks = WAIT if self.waiting else TOOLS
            if self.waiting:
                approval.mark_pending(reply, self.waiting)

    def act(self, reply: Dict[str, Any]) -> Optional[Ending]:
        """Answer the reply as ``plan`` found it: run its tools, end, or feed back."""
        asks = self.asks
        if asks is TOOLS:
            return self.batch(self.calls, {})
        if asks is ANSWER:
            return self.decide(self.output.final(reply))
        if asks is TRUNCATED:
            return self.decide(Verdict([not_run(u["id"], "truncated") for u in self.uses]))
        if asks is AGAIN:
            return self.decide(Verdict([{"type": "text", "text": MALFORMED_TEXT}]))
        if asks is SUBMIT:
            return self.decide(self.output.submission(self.uses))
        return Ending("awaiting_approval", pending=self.waiting)

    def batch(self, calls: List[ToolCall], answered: Dict[str, Any]) -> Optional[Ending]:
        """Run a batch on the tool-call path and write its results as one user message."""
        race = self.race
        race.start_tools()
        # each call that runs is journaled before its handler (nothing without a record)
        started = self.journal.starting(calls, answered, race.mark_started)
        job = partial(execute_batch, calls, self.hooks, answered,
                      parallel=self.settings.parallel_tool_calls, record=race.record,
                      started=started, stop=race.user_aborted, wrap=self.watch)
        tools = race.tools  # an inline query's tool thread (lattice/query/inline.py)
        done = job() if tools is None else tools(job)
        if done is None:  # aborted mid-batch: the consumer answers every call of it
            race.abort_from_user()
            raise Stopped
        if self.elicited:  # an MCP server's question waits for the user
            self.delegated = False
            return self.pause_for_input(done)
        message: Dict[str, Any] = {"role": "user", "content": [block for block, _ in done]}
        if self.delegated:  # subagents ran (SPEC 22): a child waits, or its usage is kept
            self.delegated = False
            if self.paused:
                return self.pause_for_children(done)
            if self.journal is not NO_JOURNAL:
                message["subagent_usage"] = self.model.take_children().to_dict(by_model=True)
        self.write(message, UserMessage)
        for block, end_turn in done:
            if end_turn:
                return self.output.tool_ended(text_of(block["content"]))
        return None

    def pause_for_children(self, done: List[Outcome]) -> Ending:
        """Subagents of this batch wait for approval (SPEC 22): the reply, marked waiting
        for them (``delegation.mark_paused``), takes its place at the end of the history,
        and the query ends ``awaiting_approval`` with their calls."""
        paused, self.paused = self.paused, {}
        assert self.last_reply is not None
        marked, pending = mark_paused(self.last_reply, done, paused,
                                      self.model.take_children())
        self.replace_last_reply(marked)
        return Ending("awaiting_approval", pending=pending)

    def pause_for_input(self, done: List[Outcome]) -> Ending:
        """Calls of this batch wait for the user's input (an MCP server asked, SPEC 23):
        like a reply waiting for approval, the reply is marked (``pending_input``: the
        questions by call id; ``answered``: what the other calls returned) and the query
        ends ``awaiting_input``; resumed with ``elicitation=``, those calls are made again."""
        elicited, self.elicited = self.elicited, {}
        assert self.last_reply is not None
        answered = {b["tool_use_id"]: b for b, _ in done
                    if b.get("tool_use_id") not in elicited}
        marked = dict(self.last_reply, pending_approval=True, pending_approval_ids=[],
                      pending_input={cid: [r.to_dict() for r in asked]
                                     for cid, asked in elicited.items()},
                      answered=answered)
        self.replace_last_reply(marked)
        return Ending("awaiting_input",
                      elicitations=[r for asked in elicited.values() for r in asked])

    def replace_last_reply(self, marked: Dict[str, Any]) -> None:
        """Put the reply, marked as waiting (for approval or input), in its place at the
        end of the history: saved as a "replace" of the store's copy, kept in memory."""
        link = self.link
        messages = self.history.messages[:-1] + [marked]
        save = partial(link.save, "replace", messages) if link.store is not None else None
        self.race.commit(save, partial(link.keep_all, messages), late=self.diverged)
        self.last_reply = marked

    def resume_batch(self) -> Optional[Ending]:
        """Run the batch that waited for approval, then the prompt given with it."""
        assert self.resume is not None
        if "ending" in self.resume:  # a resumed run that still waits for approval
            return self.resume["ending"]  # type: ignore[no-any-return]
        reply, prompt = self.resume["reply"], self.resume.get("prompt")
        self.last_reply = reply
        if self.resume.get("final"):  # a resumed run whose final reply was stored: no request
            return self.decide(self.output.final(reply))
        calls = resolve_calls(tool_uses_of(reply["content"]), self.settings.tools,
                              self.race.controller.signal, self.agent, self)
        self.child_decisions = dict(self.resume.get("children") or {})
        self.elicitation_answers = dict(self.resume.get("answers") or {})
        ending = self.batch(calls, approval.refusals(calls, self.resume["decisions"]))
        if ending is None and prompt is not None:
            self.write({"role": "user", "content": prompt})
        return ending
