"""``follow()``: a session's messages as they are stored, from any thread, process or host.

Following is a reader, not a server (DESIGN-0.3 section 4): each poll makes one cheap
``version()`` read, and only when it changed loads the history (and, with a ``run_id``, the
run record). The web page of a background run is a loop over it.

Order of reads, and why: with a ``run_id`` the record is read *before* the messages. A run
writes its last message and then records its end, so a record seen ended means every
message of the run was already written when the messages are read after it.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterator, List, Optional

from .calls import ToolCall
from .cancellation import AbortSignal, SignalLike, as_signal
from .durable import check_run_id, replay
from .messages import (
    AssistantMessage,
    ResultMessage,
    SDKMessage,
    SystemMessage,
    UserMessage,
    tool_uses_of,
)
from .settings import non_negative_number
from .stores.runs import records_runs

__all__ = ["follow"]

Message = Any


def follow(store: Any, *, after: int = 0, run_id: Optional[str] = None, poll_s: float = 0.25,
           signal: Optional[SignalLike] = None, wait_s: Optional[float] = None
           ) -> Iterator[SDKMessage]:
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

    Yields ``UserMessage``/``AssistantMessage`` for stored messages (the prompt included),
    a ``SystemMessage(subtype="compaction")`` when the history was rewritten under it
    (compaction, ``replace_history``), and with ``run_id`` last the run's result.

    Raises:
        TypeError: ``store`` is not a history store (None, a path, ...).
        ValueError: a bad option, or ``run_id`` with a store that does not record runs.
    """
    if not callable(getattr(store, "load", None)):
        raise TypeError(f"follow() takes a history store (an object with load()), "
                        f"got {type(store).__name__}: {store!r:.80}")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after must be an int >= 0, got {after!r}")
    if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not poll_s > 0:
        raise ValueError(f"poll_s must be a number > 0, got {poll_s!r}")
    if wait_s is not None:
        wait_s = non_negative_number("wait_s", wait_s)
    if run_id is not None:
        check_run_id(run_id)
        if not records_runs(store):
            raise ValueError(f"follow(run_id=...) needs a store that records runs; "
                             f"{type(store).__name__} has no load_run/save_run/list_runs")
    return _follow(store, after, run_id, float(poll_s), as_signal(signal), wait_s)


def _follow(store: Any, position: int, run_id: Optional[str], poll_s: float,
            signal: Optional[AbortSignal], wait_s: Optional[float]) -> Iterator[SDKMessage]:
    versioned = callable(getattr(store, "version", None))
    seen: Optional[List[Message]] = None  # the history as last read
    version: Any = object()  # equal to no real version: the first poll reads
    last_news = time.monotonic()
    while signal is None or not signal.aborted:
        current = store.version() if versioned else object()
        if current != version:
            version = current
            record = store.load_run(run_id) if run_id is not None else None
            messages = store.load()
            if seen is not None and not _extends(messages, seen):
                kept = _resume_point(seen, position, messages)
                yield SystemMessage("compaction", compacted_messages=max(0, position - kept))
                position = kept
            seen = messages
            # A run the store does not know (yet, or a mistyped id) owns no message: wait
            # for its record (bounded by wait_s/signal), never yield another run's messages.
            end = len(messages) if run_id is None or record is not None else position
            ended = record is not None and record.get("state") == "ended"
            if ended and isinstance(record.get("end_index"), int):  # type: ignore[union-attr]
                end = min(end, record["end_index"])  # type: ignore[index]
            for message in messages[position:end]:
                yield _item(message)
                last_news = time.monotonic()
            position = max(position, end)
            if ended:
                yield _result(record, messages[:end])  # type: ignore[arg-type]
                return
        if wait_s is not None and time.monotonic() - last_news >= wait_s:
            return
        _pause(signal, poll_s)


def _result(record: Dict[str, Any], messages: List[Message]) -> ResultMessage:
    """The run's recorded result; pending approvals as ``ToolCall``s read from the stored
    calls (no tools here: ``.tool`` is None)."""
    uses = {b.get("id"): b for m in messages if m.get("role") == "assistant"
            for b in tool_uses_of(m.get("content"))}

    def pending(ids: List[str]) -> List[Any]:
        return [ToolCall(i, uses[i].get("name", ""), uses[i].get("input"), None,
                         AbortSignal(), None) for i in ids if i in uses]

    return replay(record, None, pending)


def _item(message: Message) -> SDKMessage:
    if message.get("role") == "assistant":
        return AssistantMessage(message)
    return UserMessage(message)


def _extends(messages: List[Message], seen: List[Message]) -> bool:
    """Whether ``messages`` is ``seen`` with more messages after it (nothing rewritten)."""
    return len(messages) >= len(seen) and messages[:len(seen)] == seen


def _resume_point(seen: List[Message], position: int, messages: List[Message]) -> int:
    """Where to go on in a rewritten history: after the last message already yielded that
    survived the rewrite (compaction keeps the recent ones, right after its summary: the
    first match, since a later message may repeat it), else from its start."""
    for back in range(position - 1, max(position - 4, 0) - 1, -1):  # the last few: cheap
        for index in range(len(messages)):
            if messages[index] == seen[back]:
                return index + 1
    return 0


def _pause(signal: Optional[AbortSignal], seconds: float) -> None:
    if signal is None:
        time.sleep(seconds)
    else:
        signal.wait(seconds)  # a fired signal ends the wait at once

