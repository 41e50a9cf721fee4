"""One query's loop, run by the worker thread.

The loop decides how the query ends and returns it as an ``Ending``; a race it loses
(abort, deadline, interrupt during a model call, the consumer closing) surfaces as
``Stopped`` from the ``QueryRun``. It reads and writes the conversation only through
``History`` and the run's ``commit``; it never touches the Agent.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import compaction
from .calls import Hooks, ToolCall, needs_approval, not_run, resolve_calls, run_batch
from .endings import Ending
from .errors import (
    AbortError,
    BudgetExceededError,
    HistoryStoreError,
    MaxTurnsExceededError,
    MissingOutputError,
    PromptTooLongError,
    RequestTimeoutError,
)
from .history import History
from .messages import (
    AssistantMessage,
    StreamEvent,
    SystemMessage,
    UserMessage,
    normalize_reply,
    text_of,
    tool_result,
    tool_uses_of,
)
from .models.base import ModelRequest
from .observe import ObserverGroup
from .output import SUBMIT_OUTPUT_TOOL_NAME
from .race import QueryRun, Stopped
from .settings import QuerySettings
from .usage import Usage

__all__ = ["Loop"]

log = logging.getLogger("lattice")

CONTEXT_EXCEEDED = "model_context_window_exceeded"


class Loop:
    """One query's loop. ``__call__`` is the worker thread's target."""

    def __init__(self, run: QueryRun, settings: QuerySettings, history: History, *,
                 agent: Any = None, observers: Optional[ObserverGroup] = None,
                 query_token: Any = None, resume: Optional[Dict[str, Any]] = None) -> None:
        self.run = run
        self.settings = settings
        self.history = history
        self.agent = agent  # only handed to tools, in ToolContext
        self.observers = observers  # None when nobody watches: one check per event
        self.query_token = query_token
        self.resume = resume  # approvals: {"reply": ..., "decisions": ..., "prompt": ...}
        self.hooks = Hooks(settings.before_tool_call, settings.after_tool_call)
        self.usage = Usage()
        self.turns = 0
        self.last_reply: Optional[Dict[str, Any]] = None
        self.recovered = False  # overflow recovery happens once per query
        self.bad_outputs = 0
        self.uses: List[Dict[str, Any]] = []  # the last reply's tool_use blocks
        self.calls: List[ToolCall] = []  # the last reply's batch
        self.waiting: List[ToolCall] = []  # those of its calls that wait for approval
        self.may_pause: Optional[bool] = None  # can a call wait for approval? (first batch)

    def __call__(self) -> None:
        try:
            ending = self.loop()
        except Stopped:
            return
        except BaseException as exc:  # noqa: B036 - handed to the consumer to raise
            self.run.end(Ending.raised(exc))
            return
        self.run.end(ending)

    def loop(self) -> Ending:
        if self.resume is not None:
            ending = self.resume_batch()
            if ending is not None:
                return ending
        while True:
            self.run.check()
            limit = self.limit()
            if limit is None and self.maybe_compact():
                limit = self.limit()  # the summary may have spent the budget
            if limit is not None:
                return limit
            reply = self.next_reply()
            if reply is None:
                continue  # overflow recovered: the turn is tried again
            self.run.check()  # what the consumer did while holding the reply comes first
            uses = self.uses
            ending = self.tool_turn(reply, uses) if uses else self.final_answer(reply)
            if ending is not None:
                return ending

    # -- limits --------------------------------------------------------------------------
    def limit(self) -> Optional[Ending]:
        s = self.settings
        if self.turns >= s.max_turns:
            return Ending("error_max_turns", error=MaxTurnsExceededError(
                f"reached max_turns={s.max_turns} model requests"))
        if s.max_budget_tokens is None:
            return None
        spent = self.usage.prompt_tokens + self.usage.output_tokens
        if spent >= s.max_budget_tokens:
            return Ending("error_max_budget", error=BudgetExceededError(
                f"used {spent} tokens, max_budget_tokens={s.max_budget_tokens}"))
        return None

    def last_text(self) -> Optional[str]:
        return text_of(self.last_reply["content"]) if self.last_reply is not None else None

    # -- writing ---------------------------------------------------------------------------
    def write(self, message: Dict[str, Any], item: Any) -> None:
        """Append ``message`` (store first, then memory) and yield ``item`` (a copy of it,
        so a consumer's edits never reach the history)."""
        history = self.history
        save = partial(history.save, "append", message) if history.store is not None else None
        self.run.commit(save, partial(history.keep, message), item, late=self.diverged)

    def diverged(self) -> None:
        """Stored, but the query ended first: the next store operation resyncs it."""
        self.history.diverged = True

    def item(self, cls: Any, message: Dict[str, Any]) -> Any:
        return cls(message) if self.run.lockstep else None  # it copies when read

    # -- model calls -------------------------------------------------------------------------
    def request(self, messages: Optional[List[Dict[str, Any]]] = None) -> ModelRequest:
        s, summary = self.settings, messages is not None
        on_event = None
        if s.include_partial_messages and not summary:
            emit = self.run.emit
            on_event = lambda event: emit(StreamEvent(event))  # noqa: E731
        request = ModelRequest(
            model=s.model, messages=list(self.history.sendable) if messages is None else messages,
            system=None if summary else s.system,
            tools=[] if summary else list(s.tool_definitions), max_tokens=s.max_tokens,
            timeout_ms=s.request_timeout_ms, on_event=on_event, extra=dict(s.extra),
            signal=self.run.controller.signal)  # call() gives it the request's own
        if s.output_native and s.output is not None and not summary:
            request.output_format = s.output.json_schema
        if s.prompt_caching and not summary:  # a summary's prefix is never read again
            from .caching import mark_cache_breakpoints

            mark_cache_breakpoints(request)
        return request

    def call(self, request: ModelRequest) -> Dict[str, Any]:
        """One model call, raced against abort, interrupt and the request deadline."""
        request.signal = self.run.start_model(request.timeout_ms)
        token = self.observers.model_start(self.query_token, request) if self.observers \
            else None
        try:
            hook = self.settings.on_model_request
            if hook is not None:
                request = hook(request) or request
            reply = normalize_reply(self.settings.client.create(request))
        except BaseException as exc:
            if self.observers:
                self.observers.model_end(token, None, exc)
            if isinstance(exc, Stopped) or self.run.ended is not None:
                raise Stopped from None
            if isinstance(exc, RequestTimeoutError):
                self.run.end(Ending("error_timeout", error=exc))
                raise Stopped from None
            if isinstance(exc, AbortError) and self.run.user_aborted():
                self.run.end(Ending("error_abort", error=exc))
                raise Stopped from None
            self.run.finish_model()
            raise
        if self.observers:
            self.observers.model_end(token, reply, None)
        self.run.finish_model()
        return reply

    def next_reply(self) -> Optional[Dict[str, Any]]:
        """The next reply, in the history and yielded; None after an overflow recovery."""
        self.turns += 1
        try:
            reply = self.call(self.request())
            if reply.get("stop_reason") == CONTEXT_EXCEEDED:
                self.usage += Usage.from_dict(reply.get("usage"))  # discarded, still billed
                raise PromptTooLongError(
                    f"the model stopped with stop_reason {CONTEXT_EXCEEDED!r}")
        except PromptTooLongError as exc:
            self.recover(exc)
            return None
        self.calls, self.waiting = self.plan(reply)
        if self.waiting:  # SDK keys: kept by stores, never sent
            reply["pending_approval"] = True
            reply["pending_approval_ids"] = [c.id for c in self.waiting]
        self.write(reply, self.item(AssistantMessage, reply))
        self.last_reply = reply
        usage = Usage.from_dict(reply.get("usage"))
        self.usage += usage
        self.history.last_usage = usage
        return reply

    # -- endings -----------------------------------------------------------------------------
    def final_answer(self, reply: Dict[str, Any]) -> Optional[Ending]:
        text = text_of(reply["content"])
        output = self.settings.output
        if output is None:
            return Ending("success", result=text)
        if not self.settings.output_native:
            return Ending("error_missing_output", result=text, error=MissingOutputError(
                "the model ended its turn without calling submit_output"))
        if reply.get("stop_reason") == "refusal":
            return Ending("error_missing_output", result=text, error=MissingOutputError(
                "the model refused to give the output"))
        ok, value = output.check_text(text)
        if ok:
            return Ending("success", result=text, structured_result=value)
        ending = self.count_bad_output()
        if ending is None:
            message = {"role": "user", "content": value}
            self.write(message, self.item(UserMessage, message))
        return ending

    def count_bad_output(self) -> Optional[Ending]:
        self.bad_outputs += 1
        limit = self.settings.max_output_retries
        if limit is not None and self.bad_outputs > limit:
            return Ending("error_max_output_retries", error=MissingOutputError(
                f"no valid output after {self.bad_outputs} attempts "
                f"(max_output_retries={limit})"))
        return None

    # -- tools -----------------------------------------------------------------------------
    def write_results(self, blocks: List[Dict[str, Any]]) -> None:
        message = {"role": "user", "content": blocks}
        self.write(message, self.item(UserMessage, message))

    def tool_turn(self, reply: Dict[str, Any], uses: List[Dict[str, Any]]) -> Optional[Ending]:
        if reply.get("stop_reason") == "max_tokens":
            self.write_results([not_run(u["id"], "truncated") for u in uses])
            return None
        if self.submits(uses):
            return self.submit(uses)
        if self.waiting:
            return Ending("awaiting_approval", pending=self.waiting)
        return self.batch(self.calls, {})

    def submits(self, uses: List[Dict[str, Any]]) -> bool:
        return self.settings.output is not None and not self.settings.output_native and any(
            u.get("name") == SUBMIT_OUTPUT_TOOL_NAME for u in uses)

    def plan(self, reply: Dict[str, Any]) -> Tuple[List[ToolCall], List[ToolCall]]:
        """The calls of a reply's batch, and those that wait for approval."""
        uses = self.uses = tool_uses_of(reply["content"])
        if not uses or reply.get("stop_reason") == "max_tokens" or self.submits(uses):
            return [], []
        calls = resolve_calls(uses, self.settings.tools, self.run.controller.signal,
                              self.agent)
        if self.may_pause is None:
            s = self.settings
            self.may_pause = s.requires_approval is not None or any(
                t.requires_approval for t in s.tools.values())
        if not self.may_pause:
            return calls, []
        return calls, [c for c in calls if needs_approval(c, self.settings)]

    def batch(self, calls: List[ToolCall], decisions: Dict[str, Any]) -> Optional[Ending]:
        run = self.run
        run.start_tools()
        wrap = self.watch_tool if self.observers else None
        done = run_batch(calls, self.hooks, decisions, parallel=self.settings.parallel_tool_calls,
                         record=run.record, started=run.mark_started, stop=run.user_aborted,
                         wrap=wrap)
        if done is None:  # aborted mid-batch: the consumer answers every call of it
            run.abort_from_user()
            raise Stopped
        self.write_results([block for block, _ in done])
        for block, end_turn in done:
            if end_turn:
                text = text_of(block["content"])
                if self.settings.output is not None:
                    return Ending("error_missing_output", result=text, error=MissingOutputError(
                        "a tool ended the turn before an output was given"))
                return Ending("success", result=text)
        return None

    def watch_tool(self, call: ToolCall, run: Callable[[], Tuple[Dict[str, Any], bool]]
                   ) -> Tuple[Dict[str, Any], bool]:
        assert self.observers is not None
        token = self.observers.tool_start(self.query_token, call)
        try:
            done = run()
        except BaseException as exc:
            self.observers.tool_end(token, None, exc)
            raise
        self.observers.tool_end(token, done[0], None)
        return done

    def resume_batch(self) -> Optional[Ending]:
        """Run the batch that waited for approval, then the prompt given with it."""
        assert self.resume is not None
        reply, decisions, prompt = (self.resume["reply"], self.resume["decisions"],
                                    self.resume["prompt"])
        self.last_reply = reply
        calls = resolve_calls(tool_uses_of(reply["content"]), self.settings.tools,
                              self.run.controller.signal, self.agent)
        ending = self.batch(calls, decisions)
        if ending is None and prompt is not None:
            self.write({"role": "user", "content": prompt}, None)
        return ending

    # -- structured output -----------------------------------------------------------------
    def submit(self, uses: List[Dict[str, Any]]) -> Optional[Ending]:
        output = self.settings.output
        assert output is not None
        if len(uses) > 1:
            self.write_results([not_run(u["id"], "exclusive") for u in uses])
            return self.count_bad_output()
        use = uses[0]
        ok, value = output.check(use.get("input"))
        if not ok:
            self.write_results([tool_result(use["id"], value, True)])
            return self.count_bad_output()
        self.write_results([tool_result(use["id"], "Output accepted.")])
        return Ending("success", structured_result=value,
                      result=json.dumps(use.get("input"), ensure_ascii=False))

    # -- compaction --------------------------------------------------------------------------
    def maybe_compact(self) -> bool:
        policy = self.settings.auto_compact
        if not compaction.should_compact(policy, self.history.last_usage):
            return False
        assert policy is not None
        try:
            return self.compact(policy)
        except HistoryStoreError:
            raise  # fail_on_error: the history stays uncompacted and the error propagates
        except Exception:
            log.warning("compaction failed; continuing without it", exc_info=True)
            self.history.last_usage = Usage()  # try again after the next reply
            return False

    def compact(self, policy: compaction.AutoCompact) -> bool:
        """Summarise all but the recent messages with one model call; False if there is
        nothing safe to summarise."""
        history = self.history.messages
        cut = compaction.find_cut(history, policy.keep_recent_messages)
        if cut is None:
            return False
        request = self.request(compaction.summary_messages(history[:cut],
                                                           policy.effective_prompt))
        reply = self.call(request)
        rebuilt = compaction.rebuild(compaction.summary_text(reply), history[cut:])
        usage = Usage.from_dict(reply.get("usage"))
        self.usage += usage  # billed even if the store then fails

        def keep() -> None:
            self.history.keep_all(rebuilt)
            self.history.last_usage = Usage()

        self.run.commit(partial(self.history.save, "replace", rebuilt), keep,
                        SystemMessage("compaction", cut, usage) if self.run.lockstep else None,
                        late=self.diverged)
        return True

    def recover(self, error: PromptTooLongError) -> None:
        """Overflow: compact so the caller can retry the turn, once per query; otherwise
        raise the original error."""
        policy = self.settings.auto_compact
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
