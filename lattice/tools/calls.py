"""One tool call's life, and a batch of them.

resolve the tool -> validate the input -> (needs approval? the loop pauses the batch:
``approval.py``) -> ``before_tool_call`` -> the handler (plain or ``async def``) ->
``after_tool_call`` -> one ``tool_result`` block. Sequential and parallel batches run the
same ``execute_call``; a call a person refused is answered from ``approval.refusals`` instead.

Whatever happens becomes a tool_result the model can read; nothing raises into the loop
but ``BaseException``s that are not ``Exception`` (Ctrl-C, the loop's own ``Stopped``).
The texts the model reads about calls that did not run are in ``NOT_RUN``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..cancellation import AbortSignal
from ..messages import tool_result
from .definition import Tool, ToolCall, ToolResult, error_text, result_content

__all__ = ["NOT_RUN", "not_run", "resolve_calls", "execute_call", "execute_batch",
           "Hooks", "Outcome", "settle"]

log = logging.getLogger("lattice")

Outcome = Tuple[Dict[str, Any], bool]
"""A call's ``(tool_result block, end_turn)``."""

NOT_RUN: Dict[str, str] = {
    "unknown": "Unknown tool {name}. Available tools: {available}.",
    "invalid": "Invalid input for tool {name}:\n{problems}",
    "truncated": "The call was not run: the reply was cut off at max_tokens, so its input "
                 "may be incomplete. Make the call again with a shorter input (or split the "
                 "work).",
    "exclusive": "submit_output_exclusive_batch: submit_output must be called alone, once, "
                 "in its own turn; no call in this batch was run. Make the other calls "
                 "first, then submit.",
    "denied": "The call was not run: the user did not approve it.",
    "moved_on": "The call was not run: the user moved on without approving it.",
    "ended": "The call was not run: {why}.",
    "cut": "The call was stopped before it finished (its result was discarded): {why}.",
    # a loaded history's call with no result (stores.repair_history)
    "unfinished": "The call did not complete: the previous session ended before its result "
                  "was recorded.",
    # a durable run's call the journal says started, of a tool that is not idempotent
    "uncertain": "The run stopped while this call was running, so whether it took effect is "
                 "unknown. Check before calling it again.",
    # a durable run's call whose start the history store failed to record (fail_on_error off)
    "unjournaled": "Not run: the history store could not record that this call started, so "
                   "after a crash it could run twice. Try it again later.",
}


def not_run(tool_use_id: str, reason: str, **fields: str) -> Dict[str, Any]:
    """The ``is_error`` tool_result for a call that did not run (a row of ``NOT_RUN``)."""
    return tool_result(tool_use_id, NOT_RUN[reason].format(**fields), is_error=True)


class Hooks:
    """The Agent's tool-call options, as one value handed to ``execute_call``."""

    __slots__ = ("before", "after")

    def __init__(self, before: Optional[Callable[[ToolCall], Any]] = None,
                 after: Optional[Callable[[ToolCall, ToolResult], Any]] = None) -> None:
        self.before = before
        self.after = after


def settle(call: ToolCall, started: Mapping[str, int]) -> Tuple[str, int]:
    """The call journal's rule for a call a stopped run left unanswered (SPEC 17), from
    ``started`` (``{tool_use_id: attempt}``, written before each handler ran):

    - never started: ``("first", 1)``, it runs as usual;
    - started, of an ``idempotent`` tool: ``("again", attempt + 1)``, it runs again;
    - started, of any other tool: ``("uncertain", attempt)``, it is not run again and is
      answered with ``NOT_RUN["uncertain"]`` (whether it took effect is unknown).
    """
    attempt = started.get(call.id)
    if not isinstance(attempt, int) or isinstance(attempt, bool):
        return "first", 1
    if call.tool is not None and call.tool.idempotent:
        return "again", attempt + 1
    return "uncertain", attempt


def resolve_calls(uses: List[Dict[str, Any]], tools: Dict[str, Tool], signal: AbortSignal,
                  agent: Any, loop: Any = None) -> List[ToolCall]:
    """A ``ToolCall`` per tool_use block, with its tool found and its input checked."""
    calls = []
    for use in uses:
        name, args = use.get("name"), use.get("input")
        raw_id = use.get("id")
        use_id = raw_id if isinstance(raw_id, str) else ""
        found = tools.get(name) if isinstance(name, str) else None
        problem = None
        if found is None:
            problem = not_run(use_id, "unknown", name=repr(name),
                              available=", ".join(tools) or "(none)")
        else:
            errors = found.validation_errors(args)
            if errors is not None:
                problem = not_run(use_id, "invalid", name=repr(name), problems=errors)
        call = ToolCall(use_id, name if isinstance(name, str) else repr(name),
                        args if isinstance(args, dict) else {}, found, signal, agent, problem)
        call.loop = loop
        calls.append(call)
    return calls


def execute_call(call: ToolCall, hooks: Hooks) -> Tuple[Dict[str, Any], bool]:
    """Run one call to its ``(tool_result block, end_turn)``."""
    if call.problem is not None:
        return call.problem, False
    assert call.tool is not None
    try:
        if hooks.before is not None:
            early = hooks.before(call)
            if isinstance(early, ToolResult):
                return _after(call, hooks, early)
            if isinstance(early, dict):
                errors = call.tool.validation_errors(early)
                if errors is not None:
                    return not_run(call.id, "invalid", name=repr(call.name),
                                   problems=errors), False
                call.input = early
            elif early is not None:
                raise TypeError("before_tool_call must return None, a ToolResult or a dict, "
                                f"got {type(early).__name__}")
        tool = call.tool
        value = tool(call.input, call.context if tool.takes_context else None)
        if tool.is_async or (hasattr(value, "__await__") and hasattr(value, "send")):
            value = _run_coroutine(value, call._signal)
    except Exception as exc:
        if getattr(exc, "escapes_tools", False):  # a subagent cycle: the query raises it
            raise
        log.warning("tool %r raised %s: %s", call.name, type(exc).__name__, exc,
                    exc_info=True)
        return tool_result(call.id, error_text(call.name, exc), is_error=True), False
    if hooks.after is None:  # the common case, kept short: a turn costs ~10 us
        content, is_error, end_turn = result_content(value)
        return tool_result(call.id, content, is_error=is_error), end_turn
    return _after(call, hooks, value if isinstance(value, ToolResult) else ToolResult(value))


def _after(call: ToolCall, hooks: Hooks, result: ToolResult) -> Tuple[Dict[str, Any], bool]:
    if hooks.after is not None:
        try:
            replaced = hooks.after(call, result)
            if replaced is not None and not isinstance(replaced, ToolResult):
                raise TypeError("after_tool_call must return None or a ToolResult, "
                                f"got {type(replaced).__name__}")
        except Exception as exc:
            log.warning("after_tool_call for %r raised %s: %s", call.name,
                        type(exc).__name__, exc)
            return tool_result(call.id, error_text(call.name, exc), is_error=True), False
        result = replaced or result
    return _block(call, result)


def _block(call: ToolCall, result: ToolResult) -> Tuple[Dict[str, Any], bool]:
    content, is_error, end_turn = result_content(result)
    return tool_result(call.id, content, is_error=is_error), end_turn


def _run_coroutine(coroutine: Any, signal: AbortSignal) -> Any:
    """Run an ``async def`` tool to completion on a private event loop in this (worker)
    thread; the query's signal cancels it. asyncio is imported only when one is used."""
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(coroutine)
        def cancel() -> None:
            loop.call_soon_threadsafe(task.cancel)

        link = signal.add_callback(cancel)
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            raise RuntimeError("cancelled: the query was stopped") from None
        finally:
            signal.remove_callback(link)
    finally:
        loop.close()



def execute_batch(calls: List[ToolCall], hooks: Hooks, answered: Dict[str, Outcome], *,
              parallel: bool, record: Callable[[str, Dict[str, Any]], None],
              started: Callable[[str], Optional[Outcome]], stop: Callable[[], bool],
              wrap: Optional[Callable[[ToolCall, Callable[[], Outcome]], Outcome]] = None,
              ) -> Optional[List[Outcome]]:
    """Run a batch; results in call order. ``answered`` holds the results of calls that
    must not run (refused by a person: ``approval.refusals``). ``record`` keeps each result
    as it completes, ``started`` notes a handler about to run, ``stop()`` is asked before
    each sequential call; when it says stop, returns None (the caller repairs from what was
    recorded). ``wrap`` surrounds each call (tracing). ``started`` may answer a call
    instead of letting it run."""

    def one(call: ToolCall) -> Outcome:
        instead = started(call.id)
        if instead is not None:  # it must not run (its start could not be journaled)
            record(call.id, instead[0])
            return instead
        if wrap is None:
            done = answered.get(call.id) or execute_call(call, hooks)
        else:
            done = wrap(call, lambda: answered.get(call.id) or execute_call(call, hooks))
        record(call.id, done[0])
        return done

    if not parallel or len(calls) < 2:
        out = []
        for call in calls:
            if stop():
                return None
            out.append(one(call))
        return out
    return _parallel(calls, one)


def _parallel(calls: List[ToolCall], one: Callable[[ToolCall], Outcome]) -> List[Outcome]:
    """Daemon threads (a hung tool must not block interpreter exit); the first call runs
    in this thread. A BaseException in any call is raised here, as in a sequence."""
    out: List[Any] = [None] * len(calls)
    errors: List[BaseException] = []

    def work(i: int) -> None:
        try:
            out[i] = one(calls[i])
        except BaseException as exc:  # noqa: B036 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), daemon=True, name="lattice-tool")
               for i in range(1, len(calls))]
    for thread in threads:
        thread.start()
    work(0)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return out
