"""The agent loop of one query, as it runs in the worker thread.

``Loop.run`` is the whole algorithm; each step is a small method. Every write to the
history goes through ``QueryRun.commit``, which refuses writes once the query has ended
(abort, deadline, interrupt, closed generator), so a worker that lost the race can only
unwind.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from . import compaction
from .errors import (
    AbortError,
    MaxTurnsExceededError,
    MissingOutputError,
    PromptTooLongError,
    RequestTimeoutError,
)
from .messages import (
    AssistantMessage,
    StreamEvent,
    SystemMessage,
    UserMessage,
    text_of,
    tool_result,
    tool_uses_of,
)
from .models.base import ModelRequest
from .output import SUBMIT_OUTPUT_TOOL_NAME
from .race import End, QueryRun, Stopped
from .tools import ToolContext, error_text, result_content, tool_names
from .usage import Usage

if TYPE_CHECKING:
    from .agent import Agent, QuerySettings

__all__ = ["Loop", "Outcome"]

log = logging.getLogger("lattice")

TRUNCATED = ("The call was not run: the reply was cut off at max_tokens, so its input may be "
             "incomplete. Make the call again with a shorter input (or split the work).")
EXCLUSIVE = ("submit_output_exclusive_batch: submit_output must be called alone, once, in its "
             "own turn; no call in this batch was run. Make the other calls first, then submit.")
CONTEXT_EXCEEDED = "model_context_window_exceeded"


class Outcome:
    """How the loop itself ended (the consumer turns it into a ``ResultMessage``)."""

    __slots__ = ("subtype", "is_error", "result", "structured_result", "error")

    def __init__(self, subtype: str, *, is_error: bool = False, result: Optional[str] = None,
                 structured_result: Any = None, error: Optional[BaseException] = None) -> None:
        self.subtype = subtype
        self.is_error = is_error
        self.result = result
        self.structured_result = structured_result
        self.error = error


class Loop:
    """One query's loop. ``__call__`` is the worker thread's target."""

    def __init__(self, agent: Agent, run: QueryRun, settings: QuerySettings) -> None:
        self.agent = agent
        self.run = run
        self.settings = settings
        self.history = agent._history
        self.usage = Usage()
        self.turns = 0
        self.last_reply: Optional[Dict[str, Any]] = None
        self.recovered = False  # overflow recovery happens once per query
        self.bad_outputs = 0

    def __call__(self) -> None:
        try:
            outcome = self.loop()
        except Stopped:
            return
        except BaseException as exc:  # noqa: B036 - handed to the consumer to raise
            self.run.end(End("error", exc))
            return
        self.run.end(End("finish", outcome=outcome))

    def loop(self) -> Outcome:
        while True:
            self.check_stop()
            if self.turns >= self.settings.max_turns:
                return Outcome("error_max_turns", is_error=True, result=self.last_text(),
                               error=MaxTurnsExceededError(
                                   f"reached max_turns={self.settings.max_turns} model requests"))
            self.maybe_compact()
            reply = self.next_reply()
            self.check_stop()  # what the consumer did while holding the reply comes first
            uses = tool_uses_of(reply["content"])
            if not uses:
                return self.final_answer(reply)
            outcome = self.run_batch(reply, uses)
            if outcome is not None:
                return outcome

    # -- limits ------------------------------------------------------------------------
    def check_stop(self) -> None:
        """Abort and interrupt are honoured before every model request and tool batch."""
        if self.run.user_aborted():
            self.run.abort_from_user()
            raise Stopped
        if self.run.interrupted:
            self.run.end(End("interrupt"))
            raise Stopped

    def last_text(self) -> Optional[str]:
        return text_of(self.last_reply["content"]) if self.last_reply is not None else None

    # -- model calls -------------------------------------------------------------------
    def request(self, messages: Optional[List[Dict[str, Any]]] = None,
                for_summary: bool = False) -> ModelRequest:
        s = self.settings
        on_event = None
        if s.include_partial_messages and not for_summary:
            emit = self.run.emit
            on_event = lambda event: emit(StreamEvent(event))  # noqa: E731
        return ModelRequest(
            model=s.model, messages=list(self.history.wire) if messages is None else messages,
            system=None if for_summary else s.system,
            tools=[] if for_summary else list(s.tool_definitions), max_tokens=s.max_tokens,
            timeout_ms=s.request_timeout_ms, on_event=on_event, extra=dict(s.extra))

    def call(self, request: ModelRequest) -> Dict[str, Any]:
        """One model call, raced against abort, interrupt and the request deadline."""
        request.signal = self.run.start_model(request.timeout_ms)
        try:
            hook = self.settings.on_model_request
            if hook is not None:
                request = hook(request) or request
            raw = self.settings.client.create(request)
        except Stopped:
            raise
        except BaseException as exc:
            if self.run.ended is not None:
                raise Stopped from None
            if isinstance(exc, RequestTimeoutError):
                self.run.end(End("timeout", exc))
                raise Stopped from None
            if isinstance(exc, AbortError) and self.run.user_aborted():
                self.run.end(End("abort", exc))
                raise Stopped from None
            self.run.finish_model()
            raise
        self.run.finish_model()
        return _reply_entry(raw)

    def next_reply(self) -> Dict[str, Any]:
        """The next reply in the history (and yielded), recovering once from overflow."""
        while True:
            self.turns += 1
            try:
                reply = self.call(self.request())
                if reply.get("stop_reason") == CONTEXT_EXCEEDED:
                    raise PromptTooLongError(
                        f"the model stopped with stop_reason {CONTEXT_EXCEEDED!r}")
            except PromptTooLongError as exc:
                self.recover(exc)
                self.check_stop()
                continue
            self.run.commit(partial(self.accept, reply), AssistantMessage(reply))
            return reply

    def accept(self, reply: Dict[str, Any]) -> None:
        self.history.append(reply)
        self.last_reply = reply
        usage = Usage.from_dict(reply.get("usage"))
        self.usage = self.usage + usage
        self.agent._last_prompt_tokens = usage.prompt_tokens

    # -- endings -------------------------------------------------------------------------
    def final_answer(self, reply: Dict[str, Any]) -> Outcome:
        text = text_of(reply["content"])
        if self.settings.output is not None:
            return Outcome("error_missing_output", is_error=True, result=text,
                           error=MissingOutputError(
                               "the model ended its turn without calling submit_output"))
        return Outcome("success", result=text)

    # -- tools -----------------------------------------------------------------------------
    def run_batch(self, reply: Dict[str, Any], uses: List[Dict[str, Any]]) -> Optional[Outcome]:
        if reply.get("stop_reason") == "max_tokens":
            self.write_results([tool_result(u["id"], TRUNCATED, True) for u in uses])
            return None
        if self.settings.output is not None and any(
                u.get("name") == SUBMIT_OUTPUT_TOOL_NAME for u in uses):
            return self.submit(uses)
        self.run.start_tools()
        if self.settings.parallel_tool_calls and len(uses) > 1:
            done = self.run_parallel(uses)
        else:
            done = []
            for use in uses:
                if self.run.user_aborted():
                    break  # abort stops a batch; interrupt lets it finish
                done.append(self.run_one(use))
        blocks = [block for block, _ in done]
        self.write_results(blocks)
        for (block, end_turn) in done:
            if end_turn:
                return Outcome("success", result=text_of(block["content"]))
        return None

    def write_results(self, blocks: List[Dict[str, Any]]) -> None:
        message = {"role": "user", "content": blocks}
        self.run.commit(lambda: self.history.append(message), UserMessage(message))

    def run_one(self, use: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
        """Run one call; whatever happens becomes a tool_result."""
        use_id, name, args = use.get("id", ""), use.get("name", ""), use.get("input")
        # args is checked to be a dict by validation_errors before the handler sees it
        tool = self.settings.tools.get(name)
        end_turn = False
        if tool is None:
            block = tool_result(use_id, f"Unknown tool {name!r}. Available tools: "
                                f"{tool_names(list(self.settings.tools.values()))}.", True)
        else:
            problems = tool.validation_errors(args)
            if problems is not None:
                block = tool_result(use_id, f"Invalid input for tool {name!r}:\n{problems}",
                                    True)
            else:
                context = ToolContext(self.run.controller.signal, use_id, self.agent)
                self.run.started.add(use_id)  # set.add is atomic: no lock on the hot path
                try:
                    content, is_error, end_turn = result_content(tool(args or {}, context))
                    block = tool_result(use_id, content, is_error)
                except Exception as exc:
                    log.debug("tool %s raised", name, exc_info=True)
                    block = tool_result(use_id, error_text(name, exc), True)
        self.run.record(use_id, block)
        return block, end_turn

    def run_parallel(self, uses: List[Dict[str, Any]]) -> List[Tuple[Dict[str, Any], bool]]:
        """Run a batch in daemon threads (a hung tool must not block interpreter exit);
        results stay in tool_use order."""
        out: List[Any] = [None] * len(uses)
        errors: List[BaseException] = []

        def work(i: int) -> None:
            try:
                out[i] = self.run_one(uses[i])
            except BaseException as exc:  # noqa: B036 - raised in the worker, as in sequence
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,), daemon=True,
                                    name="lattice-tool") for i in range(1, len(uses))]
        for thread in threads:
            thread.start()
        work(0)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return out

    # -- structured output -----------------------------------------------------------------
    def submit(self, uses: List[Dict[str, Any]]) -> Optional[Outcome]:
        output = self.settings.output
        assert output is not None
        if len(uses) > 1:
            self.write_results([tool_result(u["id"], EXCLUSIVE, True) for u in uses])
            return self.count_bad_output()
        use = uses[0]
        ok, value = output.check(use.get("input"))
        if not ok:
            self.write_results([tool_result(use["id"], value, True)])
            return self.count_bad_output()
        self.write_results([tool_result(use["id"], "Output accepted.")])
        return Outcome("success", structured_result=value,
                       result=json.dumps(use.get("input"), ensure_ascii=False))

    def count_bad_output(self) -> Optional[Outcome]:
        self.bad_outputs += 1
        limit = self.settings.max_output_retries
        if limit is not None and self.bad_outputs > limit:
            return Outcome("error_max_output_retries", is_error=True, result=self.last_text(),
                           error=MissingOutputError(
                               f"no valid submit_output after {self.bad_outputs} attempts "
                               f"(max_output_retries={limit})"))
        return None

    # -- compaction --------------------------------------------------------------------------
    def maybe_compact(self) -> None:
        policy = self.settings.auto_compact
        if policy is None or self.agent._last_prompt_tokens <= policy.threshold_tokens:
            return
        try:
            self.compact(policy)
        except Exception:
            log.warning("compaction failed; continuing without it", exc_info=True)
            self.agent._last_prompt_tokens = 0  # try again after the next reply

    def compact(self, policy: compaction.AutoCompact) -> bool:
        """Summarise all but the recent messages with one model call; False if there is
        nothing safe to summarise."""
        history = self.history.messages
        cut = compaction.find_cut(history, policy.keep_recent_messages)
        if cut is None:
            return False
        prompt = policy.prompt or compaction.DEFAULT_COMPACTION_PROMPT
        request = self.request(compaction.summary_messages(history[:cut], prompt), True)
        reply = self.call(request)
        rebuilt = compaction.rebuild(compaction.summary_text(reply), history[cut:])
        usage = Usage.from_dict(reply.get("usage"))

        def write() -> None:
            self.history.replace(rebuilt)
            self.usage = self.usage + usage
            self.agent._last_prompt_tokens = 0

        self.run.commit(write, SystemMessage("compaction", cut, usage))
        return True

    def recover(self, error: PromptTooLongError) -> None:
        """Overflow: compact and let the caller retry the turn, once per query; otherwise
        raise the original error."""
        policy = self.settings.auto_compact
        if policy is None or self.recovered:
            raise error
        self.recovered = True
        try:
            compacted = self.compact(policy)
        except Exception:
            raise error from None
        if not compacted:
            raise error


def _reply_entry(raw: Any) -> Dict[str, Any]:
    """The history entry for a client's reply (validated: a bad client fails loudly).
    A bare string is taken as a text reply, which makes one-line test clients possible."""
    if isinstance(raw, str):
        raw = {"content": raw, "stop_reason": "end_turn"}
    if not isinstance(raw, dict):
        raise TypeError(f"the model client returned {type(raw).__name__}, expected a dict "
                        "like {'role': 'assistant', 'content': [...]}")
    content = raw.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TypeError(f"the model client's reply has content {content!r}, expected a list "
                        "of content blocks")
    entry: Dict[str, Any] = {"role": "assistant", "content": content}
    for key in ("model", "provider_response_id", "stop_reason", "usage"):
        value = raw.get(key)
        if value is not None:
            entry[key] = value
    return entry
