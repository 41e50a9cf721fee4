"""What every store's ``load`` keeps: values shaped like history messages.

A stored value that is JSON but not a message (``{"content": "x"}``, a role ``"robot"``,
content ``5``, a block that is a string, a ``tool_use`` without an id) would make every
Agent resuming that history fail or send the provider something it rejects. Each store
parses its own format, then passes what it parsed through ``keep_messages``, so the rule is
the same for all of them and is written here once.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

__all__ = ["is_message", "keep_messages"]

logger = logging.getLogger("lattice")

_ROLES = ("user", "assistant")


def is_message(value: Any) -> bool:
    """Whether ``value`` is a history message.

    That is a dict whose ``role`` is ``"user"`` or ``"assistant"`` and whose ``content`` is a
    str or a list of blocks: dicts with a str ``type``, a ``tool_use`` also with a str ``id``
    and ``name``, a ``tool_result`` also with a str ``tool_use_id``. Other keys are allowed.
    """
    # Written out flat: load runs it on every stored message.
    if not isinstance(value, dict) or value.get("role") not in _ROLES:
        return False
    content = value.get("content")
    if isinstance(content, str):
        return True
    if not isinstance(content, list):
        return False
    for block in content:
        if not isinstance(block, dict):
            return False
        kind = block.get("type")
        if not isinstance(kind, str):
            return False
        if kind == "tool_use":
            if not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)):
                return False
        elif kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            return False
    return True


def keep_messages(
    values: List[Any], where: str, *, unit: str = "entry", unreadable: int = 0
) -> List[Dict[str, Any]]:
    """The values of ``values`` that are messages, in order.

    What is dropped, plus the ``unreadable`` entries the store could not even parse, is
    counted in one WARNING on the ``lattice`` logger, e.g. ``skipped 2 corrupt line(s) in
    history file /x/h.jsonl (1 unreadable, 1 not a history message)``. ``where`` names the
    file (and the session, where there is one); ``unit`` is what the store calls an entry.
    """
    kept = [value for value in values if is_message(value)]
    skipped = len(values) - len(kept)
    if skipped or unreadable:
        logger.warning(
            "skipped %d corrupt %s(s) in %s (%d unreadable, %d not a history message)",
            skipped + unreadable, unit, where, unreadable, skipped,
        )
    return kept
