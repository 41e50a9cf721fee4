"""``follow()``: a session's messages as they are stored, from any thread, process or host.

Following is a reader, not a server (DESIGN-0.3 section 4): each poll makes one cheap
``version()`` read, and only when it changed loads the history (and, with a ``run_id``, the
run record). The web page of a background run is a loop over it.

Order of reads, and why: with a ``run_id`` the record is read *before* the messages. A run
writes its last message and then records its end, so a record seen ended means every
message of the run was already written when the messages are read after it.

The cursor is stable (SPEC 21b): ``after`` past the stored history waits for the history to
reach it; a rewrite under the follower (compaction, ``replace_history``) yields the
compaction ``SystemMessage`` and goes on after the last message it yielded that survived;
a run id the store does not know yet yields nothing until its record appears; an ended
run's messages stop at its ``end_index`` (a run superseded by another query included).
"""

from __future__ import annotations

import time
from typing import Any, Iterator, List, Optional

from ..cancellation import AbortSignal, SignalLike, as_signal
from ..errors import HistoryStoreError
from ..messages import (
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    SystemMessage,
    UserMessage,
    tool_uses_of,
)
from ..options import check_bool, non_negative_number
from ..stores.base import HistoryStore, describe_store
from ..stores.capabilities import Capabilities, is_store
from ..stores.derived import derived_store
from ..tools.definition import ToolCall
from .record import RunRecord
from .runs import check_run_id, read_record

__all__ = ["follow"]

Message = Any


def follow(store: HistoryStore, *, after: int = 0, run_id: Optional[str] = None,
           poll_s: float = 0.25, signal: Optional[SignalLike] = None,
           wait_s: Optional[float] = None,
           include_subagent_messages: bool = False) -> Iterator[SDKMessage]:
    """The session's messages stored after index ``after``, as ``query()`` yields them.

    Args:
        store: a history store (any; ``version()`` makes polling cheap, without it every
            poll loads the history).
        after: how many stored messages to skip (``history[after:]`` is yielded).
        run_id: follow this run: stop after its last message and yield its
            ``ResultMessage`` (``replayed=True``) once it has ended; a run not recorded yet
            is waited for. Needs a store that records runs.
        poll_s: seconds between polls.
        signal: an ``AbortSignal`` or ``threading.Event``; when it fires the iterator ends
            quietly (no result).
        wait_s: end when this many seconds pass without news (None: never).
        include_subagent_messages: with ``run_id``, also yield the messages of the
            subagent runs it made (SPEC 22; those kept in the store's derived sessions,
            the default for a child without a store of its own, or in another session of
            the same database), each with ``.parent_tool_use_id``, before the tool results
            they led to (or the result of a run that paused for a child's approval).

    Yields ``UserMessage``/``AssistantMessage`` for stored messages (the prompt included),
    a ``SystemMessage(subtype="compaction")`` when the history was rewritten under it
    (compaction, ``replace_history``), and with ``run_id`` last the run's result.

    Raises:
        TypeError: ``store`` is not a history store.
        ValueError: a bad option, or ``run_id`` with a store that does not record runs.
        HistoryStoreError: the run's record is damaged.
    """
    if not is_store(store):
        raise TypeError(f"follow() needs a history store (load, append, replace), got "
                        f"{type(store).__name__} {store!r:.60}")
    caps = Capabilities.of(store)  # what the store can do, asked once
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after must be an int >= 0, got {after!r}")
    if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not poll_s > 0:
        raise ValueError(f"poll_s must be a number > 0, got {poll_s!r}")
    if wait_s is not None:
        wait_s = non_negative_number("wait_s", wait_s)
    check_bool("include_subagent_messages", include_subagent_messages)
    if run_id is not None:
        check_run_id(run_id)
        if not caps.records_runs:
            raise ValueError(f"follow(run_id=...) needs a store that records runs; "
                             f"{type(store).__name__} has no load_run/save_run/list_runs")
    return _follow(store, caps, after, run_id, float(poll_s), as_signal(signal), wait_s,
                   include_subagent_messages and run_id is not None)


def _follow(store: Any, caps: Capabilities, position: int, run_id: Optional[str],
            poll_s: float, signal: Optional[AbortSignal], wait_s: Optional[float],
            children: bool = False) -> Iterator[SDKMessage]:
    versioned = caps.versioned
    seen: Optional[List[Message]] = None  # the history as last read
    version: Any = object()  # equal to no real version: the first poll reads
    last_news = time.monotonic()
    while signal is None or not signal.aborted:
        current = store.version() if versioned else object()
        if current != version:
            version = current
            record = _record(store, run_id) if run_id is not None else None
            messages = list(store.load())
            if seen is not None and not _extends(messages, seen):
                kept = _resume_point(seen, position, messages)
                yield SystemMessage("compaction", compacted_messages=max(0, position - kept))
                position = kept
            seen = messages
            end = len(messages)
            if run_id is not None and record is None:
                end = 0  # not recorded yet: no other run's messages while waiting for it
            elif record is not None and record.is_ended and record.end_index is not None:
                end = min(end, record.end_index)
            for index in range(position, end):
                message = messages[index]
                if children and run_id is not None and index > 0:
                    yield from _children(store, run_id, _results_of(message), poll_s, signal)
                yield _item(message)
                last_news = time.monotonic()
            position = max(position, end)
            if record is not None and record.is_ended:
                if children and run_id is not None and end > 0:
                    # A run that paused for a child's approval (SPEC 22): what its children
                    # did before the pause, as query() yields it (no tool results follow)
                    yield from _children(store, run_id, _paused_calls(messages[end - 1]),
                                         poll_s, signal)
                yield _result(record, messages[:end])
                return
        if wait_s is not None and time.monotonic() - last_news >= wait_s:
            return
        _pause(signal, poll_s)


def _record(store: Any, run_id: str) -> Optional[RunRecord]:
    """The run's record; one the store cannot decode (SQLite's and PostgreSQL's
    ``load_run`` raise ``ValueError``) is damaged as much as one that decodes to nonsense:
    a ``HistoryStoreError`` naming the run and the store (SPEC 21b), from ``follow`` too."""
    try:
        data = store.load_run(run_id)
    except ValueError as exc:
        raise HistoryStoreError(f"{exc}: it is damaged (store: {describe_store(store)})"
                                ) from None
    return read_record(data, run_id, store)


def _results_of(message: Message) -> List[str]:
    """The call ids a message of tool results answers."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    return [b["tool_use_id"] for b in content
            if isinstance(b, dict) and isinstance(b.get("tool_use_id"), str)]


def _paused_calls(message: Message) -> List[str]:
    """The call ids of a reply that waits for its subagents (marked by the pause), in
    the reply's order: the children that paused and those that had returned."""
    if message.get("role") != "assistant" or not isinstance(
            message.get("pending_children"), dict):
        return []
    return [u["id"] for u in tool_uses_of(message.get("content"))
            if isinstance(u.get("id"), str)]


def _child_store(store: Any, child_run: str, call_id: str) -> Any:
    """Where the child run ``child_run`` is kept: the store's derived session (a child
    without a store of its own), else any session of the same database that records it (a
    child with its own store there: SQLite, PostgreSQL); None when it is in neither."""
    child = derived_store(store, call_id)
    if child is not None:
        caps = Capabilities.of(child)
        if caps.records_runs and child.load_run(child_run) is not None:
            return child
    with_session = getattr(store, "with_session", None)
    if not callable(with_session):
        return None
    try:
        runs = store.list_runs(all_sessions=True)
    except TypeError:  # a store without sessions to list
        return None
    for run in runs:
        if run.get("run_id") == child_run and isinstance(run.get("session_id"), str):
            return with_session(run["session_id"])
    return None


def _children(store: Any, run_id: str, call_ids: List[str], poll_s: float,
              signal: Optional[AbortSignal]) -> Iterator[SDKMessage]:
    """The messages of the subagent runs of ``call_ids`` (before the tool results they
    made, or a pause's result), each marked with its call's id."""
    for call_id in call_ids:
        child_run = f"{run_id}/{call_id}"
        child = _child_store(store, child_run, call_id)
        if child is None:
            continue
        caps = Capabilities.of(child)
        for item in _follow(child, caps, 0, child_run, poll_s, signal, None, True):
            if isinstance(item, ResultMessage):
                break
            if item.parent_tool_use_id is None:
                item.parent_tool_use_id = call_id
            yield item


def _result(record: RunRecord, messages: List[Message]) -> ResultMessage:
    """The run's recorded result; pending approvals as recorded (a 0.3 record: read from
    the stored calls), with no tools here (``.tool`` is None)."""
    uses = {b.get("id"): b for m in messages if m.get("role") == "assistant"
            for b in tool_uses_of(m.get("content"))}

    def pending(ids: List[str]) -> List[ToolCall]:
        return [ToolCall(i, uses[i].get("name", ""), uses[i].get("input"), None,
                         AbortSignal(), None) for i in ids if i in uses]

    return record.replay(None, {}, pending)


def _item(message: Message) -> SDKMessage:
    if message.get("role") == "assistant":
        return AssistantMessage(message)
    return UserMessage(message)


def _extends(messages: List[Message], seen: List[Message]) -> bool:
    """Whether ``messages`` is ``seen`` with more messages after it (nothing rewritten; a
    last reply marked afterwards, as a subagent's pause marks it, is the same message)."""
    n = len(seen)
    if n == 0:
        return True
    if len(messages) < n or messages[:n - 1] != seen[:n - 1]:
        return False
    return messages[n - 1] == seen[n - 1] or (
        messages[n - 1].get("role"), messages[n - 1].get("content")) == (
        seen[n - 1].get("role"), seen[n - 1].get("content"))


def _resume_point(seen: List[Message], position: int, messages: List[Message]) -> int:
    """Where to go on in a rewritten history: after the last message already yielded that
    survived the rewrite (compaction keeps the recent ones, right after its summary: the
    first match, since a later message may repeat it), else from its start. A cursor past
    what was seen (``after`` beyond the history) keeps its distance from that point."""
    ahead = max(0, position - len(seen))
    position -= ahead
    for back in range(position - 1, max(position - 4, 0) - 1, -1):  # the last few: cheap
        for index in range(len(messages)):
            if messages[index] == seen[back]:
                return index + 1 + ahead
    return ahead


def _pause(signal: Optional[AbortSignal], seconds: float) -> None:
    if signal is None:
        time.sleep(seconds)
    else:
        signal.wait(seconds)  # a fired signal ends the wait at once

