"""Automatic compaction's rules: the policy (``AutoCompact``), the trigger, and the history
surgery, as pure functions that decide and rewrite (the summary request's text is in
``summary_request.py``; ``compactor.py`` is what the loop talks to)::

    if should_compact(settings, last_usage):
        cut = find_cut(history, settings.keep_recent_messages)
        if cut is not None:
            messages = summary_messages(history[:cut], settings.effective_prompt)
            reply = <model call with messages, no tools>
            history = rebuild(summary_text(reply), history[cut:])

Nothing here mutates its arguments: new dicts and lists are built where a message
changes, and untouched messages (and every content block) are shared as they are, so
thinking blocks and provider metadata survive compaction byte for byte.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..options import non_negative_int, positive_int
from ..usage import USAGE_FIELDS, Usage
from .summary_request import DEFAULT_COMPACTION_PROMPT, summary_messages

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "AutoCompact",
    "resolve_auto_compact",
    "prompt_size",
    "should_compact",
    "find_cut",
    "summary_messages",
    "summary_text",
    "wrap_summary",
    "rebuild",
]

log = logging.getLogger("lattice")

Message = Dict[str, Any]

# --- settings -----------------------------------------------------------------------


@dataclass(frozen=True)
class AutoCompact:
    """When and how to compact the history.

    Attributes:
        threshold_tokens: compact once a response's prompt size exceeds this.
        keep_recent_messages: how many trailing messages are kept verbatim (the cut may
            keep a few more, so that no tool_result is parted from its tool_use).
        prompt: the summarisation instruction; None means ``DEFAULT_COMPACTION_PROMPT``.
    """

    threshold_tokens: int = 100_000
    keep_recent_messages: int = 6
    prompt: Optional[str] = None

    def __post_init__(self) -> None:
        positive_int("auto_compact.threshold_tokens", self.threshold_tokens)
        non_negative_int("auto_compact.keep_recent_messages", self.keep_recent_messages)
        if self.prompt is not None and (not isinstance(self.prompt, str)
                                        or not self.prompt.strip()):
            raise ValueError("auto_compact.prompt must be a non-empty str or None, "
                             f"got {self.prompt!r}")

    @property
    def effective_prompt(self) -> str:
        """The instruction the summary request carries."""
        return self.prompt if self.prompt is not None else DEFAULT_COMPACTION_PROMPT


_FIELDS = tuple(f.name for f in fields(AutoCompact))


def resolve_auto_compact(value: object) -> Optional[AutoCompact]:
    """Turn the ``auto_compact`` option into settings, or None when compaction is off.

    Accepts False/None (off), True (defaults), an ``AutoCompact``, or a mapping of its
    fields. Anything else, or a mapping with unknown keys, raises ``ValueError``.
    """
    # Identity checks: 0 and 1 compare equal to False and True but are not valid here.
    if value is None or value is False:
        return None
    if value is True:
        return AutoCompact()
    if isinstance(value, AutoCompact):
        return value
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in _FIELDS]
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            raise ValueError(f"auto_compact has unknown keys {names} "
                             f"(known: {', '.join(_FIELDS)})")
        return AutoCompact(**value)
    raise ValueError("auto_compact must be a bool, an AutoCompact or a dict of its fields, "
                     f"got {value!r}")


# --- the trigger --------------------------------------------------------------------

def prompt_size(usage: object) -> int:
    """Tokens the model read for one response: fresh input plus both cache fields.

    ``usage`` is a usage dict or any object with those attributes (e.g. ``Usage``);
    missing or None fields count as 0, and so does ``usage=None``.
    """
    if not isinstance(usage, Mapping):
        usage = {name: getattr(usage, name, None) for name in USAGE_FIELDS}
    return Usage.from_dict(usage).prompt_tokens


def should_compact(settings: Optional[AutoCompact], usage: object) -> bool:
    """True when compaction is on and the reported prompt size exceeds the threshold.

    A client that reports no usage gives 0 here, so it never triggers compaction.
    """
    return settings is not None and prompt_size(usage) > settings.threshold_tokens


# --- where to cut -------------------------------------------------------------------


def _blocks(message: Mapping[str, Any]) -> List[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _holds_tool_results(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "user" and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in _blocks(message))


def find_cut(history: Sequence[Mapping[str, Any]], keep_recent: int) -> Optional[int]:
    """Index of the first kept message, or None when there is nothing safe to summarise.

    ``history[:cut]`` is summarised and ``history[cut:]`` kept. The cut starts so that
    ``keep_recent`` messages are kept, and moves earlier while the first kept message is a
    user message holding tool_results: those must stay next to the assistant message
    whose tool_use they answer. That also means the summarised part never ends in an
    unanswered tool_use, since its answer would be the (unsafe) first kept message.
    """
    non_negative_int("keep_recent", keep_recent)
    cut = max(len(history) - keep_recent, 0)
    while 0 < cut < len(history) and _holds_tool_results(history[cut]):
        cut -= 1
    return cut if cut > 0 else None


# --- the summary ------------------------------------------------------------------


def summary_text(reply: Mapping[str, Any]) -> str:
    """The summary written by the model: its reply's text blocks, joined and stripped."""
    content = reply.get("content")
    if isinstance(content, str):
        text = content
    else:
        text = "".join(str(b.get("text", "")) for b in _blocks(reply)
                       if isinstance(b, dict) and b.get("type") == "text")
    text = text.strip()
    if not text:
        raise ValueError("compaction summary was empty")
    return text


# --- the new history ----------------------------------------------------------------


def wrap_summary(summary: str) -> str:
    """The summary as the model will read it: marked as a summary, with how to go on."""
    return ("The earlier part of this conversation was compacted just now to save context: "
            "it has been replaced by the summary below. Continue the task from where it "
            "left off, using the summary and the messages that follow. Do not restart the "
            "task, repeat finished work, or ask the user again for things the summary "
            "already records.\n\n"
            f"<conversation-summary>\n{summary}\n</conversation-summary>")


def rebuild(summary: str, kept: Sequence[Message]) -> List[Message]:
    """The compacted history: the wrapped summary, then ``kept`` (a suffix of the old one).

    The summary is a user message of its own before an assistant message; before a user
    message it becomes that message's first text block, so roles still alternate. Kept
    messages are shared, not copied; only a merged first message is a new dict.
    """
    block = {"type": "text", "text": wrap_summary(summary)}
    if not kept:
        return [{"role": "user", "content": [block]}]
    first = kept[0]
    if first.get("role") != "user":
        return [{"role": "user", "content": [block]}, *kept]
    if _holds_tool_results(first):
        # The API wants tool_results first in their message, and their tool_use is gone.
        raise ValueError("the kept messages must not start with a tool_result message; "
                         "choose the cut with find_cut")
    content = first.get("content")
    if isinstance(content, list):
        merged: List[Any] = [block, *content]
    elif isinstance(content, str) and content:
        merged = [block, {"type": "text", "text": content}]
    else:
        # The API rejects empty text blocks, so an empty prompt adds nothing.
        merged = [block]
    return [{**first, "content": merged}, *kept[1:]]


# --- the side effects, for one query -------------------------------------------------
