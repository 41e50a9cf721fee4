"""What a reply from a server must look like before anything reads it (SPEC 16a).

A server (or a test double) can send anything: a field of the wrong type, or JSON nested
so deep that recursive code (``json``, ``copy.deepcopy``, the request body's encoder)
overflows the stack. Here those become one ``APIConnectionError`` naming the field (MCP
turns it into its own ``protocol`` error), never a bare ``TypeError``, ``AttributeError``,
``KeyError`` or ``RecursionError`` deeper in the loop.

* ``too_deep(value)``: nesting deeper than ``MAX_DEPTH`` (counted from the top), checked
  without recursion;
* ``top_level_id(data)``: the JSON-RPC ``id`` of a message too deep to parse;
* ``malformed(field, value, wanted)``: the error naming a field;
* ``check_reply(reply)``: an assistant dict as the loop needs it (the last step of every
  codec and of the test doubles).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional

from ..errors import APIConnectionError

__all__ = ["MAX_DEPTH", "too_deep", "top_level_id", "malformed", "optional", "check_reply",
           "no_content", "check_depth"]

MAX_DEPTH = 100


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True if ``value`` nests lists and dicts more than ``limit`` levels deep."""
    level: List[Any] = [value]
    depth = 0
    while level:
        nested = [v for v in level if isinstance(v, (dict, list))]
        if not nested:
            return False
        depth += 1
        if depth > limit:
            return True
        level = []
        for item in nested:
            level.extend(item.values() if isinstance(item, dict) else item)
    return False


def check_depth(value: Any, what: str) -> None:
    """``APIConnectionError`` if ``value`` (``what``) nests deeper than ``MAX_DEPTH``."""
    if too_deep(value):
        raise APIConnectionError(f"malformed reply: {what} nests deeper than {MAX_DEPTH} "
                                 "levels")


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_COLON = re.compile(r"\s*:\s*")


def top_level_id(data: bytes) -> Any:
    """The ``id`` member of the top-level object in ``data`` (JSON text, possibly nested
    too deep for ``json`` to parse), or None. Strings are skipped whole, so an ``"id"``
    inside one, or deeper down, is never taken for it."""
    text = data.decode("utf-8", "replace")
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif depth == 1 and token == '"id"':
            colon = _COLON.match(text, match.end())
            if colon is None:
                continue
            try:
                value, _ = json.JSONDecoder().raw_decode(text, colon.end())
            except (ValueError, RecursionError):
                return None
            return value if isinstance(value, (str, int)) else None
    return None


def malformed(field: str, value: Any, wanted: str) -> APIConnectionError:
    """The error for a reply whose ``field`` holds ``value`` where ``wanted`` belongs."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return APIConnectionError(f"malformed reply: {field} must be {wanted}, got "
                              f"{type(value).__name__} {shown}")


def optional(value: Any, kinds: Any, field: str, wanted: str) -> Any:
    """``value`` if it is None or of ``kinds``; else ``malformed(field, ...)`` raised."""
    if value is None or isinstance(value, kinds):
        return value
    raise malformed(field, value, wanted)


def _block_problem(index: int, block: Any) -> Optional[APIConnectionError]:
    where = f"content[{index}]"
    if not isinstance(block, dict):
        return malformed(where, block, "an object")
    kind = block.get("type")
    if not isinstance(kind, str):
        return malformed(f"{where}.type", kind, "a string")
    for name, wanted in _BLOCK_FIELDS.get(kind, ()):
        value = block.get(name)
        if not isinstance(value, wanted):
            return malformed(f"{where}.{name}", value, _WANTED[wanted])
    return None


_WANTED = {str: "a string", dict: "an object", list: "a list"}
# The fields the loop, history and stores read of each block type (others pass as given).
_BLOCK_FIELDS: Dict[str, Any] = {
    "text": (("text", str),),
    "thinking": (("thinking", str),),
    "tool_use": (("id", str), ("name", str)),
    "server_tool_use": (("id", str), ("name", str)),
}


def no_content(body: Any, why: str = "no content and no stop reason") -> APIConnectionError:
    """The error for a 200 reply with no content and no stop reason (a gateway's ``{}``):
    never a success with an empty result (SPEC 21b)."""
    shown = json.dumps(body, default=str)[:200] if body is not None else ""
    return APIConnectionError(f"the reply had no content ({why})"
                              + (f": {shown}" if shown else ""))


def check_reply(reply: Mapping[str, Any]) -> None:
    """``reply`` (an assistant dict) if the loop can read it; else ``APIConnectionError``
    naming the first bad field: content a list of objects each with a string ``type``
    (text, thinking and tool calls with their string fields), usage counts ints, no
    nesting deeper than ``MAX_DEPTH``."""
    content = reply.get("content")
    if not isinstance(content, list):
        raise malformed("content", content, "a list")
    for index, block in enumerate(content):
        problem = _block_problem(index, block)
        if problem is not None:
            raise problem
    check_depth(content, "content")
    stop = reply.get("stop_reason")
    if stop is not None and not isinstance(stop, str):
        raise malformed("stop_reason", stop, "a string or null")
    for name in ("model", "provider_response_id"):
        value = reply.get(name)
        if value is not None and not isinstance(value, str):
            raise malformed(name, value, "a string or null")
    usage = reply.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise malformed("usage", usage, "an object")
