"""What ``MockMessagesServer`` refuses, as the real Messages API does, and count_tokens.

``request_problem`` returns the message of the 400 ``invalid_request_error`` the real API
would answer (in its wording, ``messages.N...`` paths included), or None for a request it
accepts. Only the refusals a client library can cause are checked: missing fields, empty
or malformed messages, broken tool_use/tool_result pairing, a missing version header.
Consecutive messages with the same role are accepted (the API merges them).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Set

__all__ = ["COUNT_TOKENS_PATH", "request_problem", "count_tokens"]

COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
_ROLES = ("user", "assistant")
_MESSAGE_KEYS = frozenset(["role", "content"])


def request_problem(body: Any, headers: Mapping[str, str], *, count_tokens: bool = False
                    ) -> Optional[str]:
    """Why the real API would refuse this request (None when it would not).

    ``headers`` have lower-case names. ``count_tokens``: the body of a count_tokens
    request, which has no ``max_tokens``.
    """
    if not headers.get("anthropic-version"):
        return "anthropic-version: header is required"
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    required = ("model", "messages") if count_tokens else ("model", "max_tokens", "messages")
    for name in required:
        if name not in body:
            return f"{name}: Field required"
    messages = body["messages"]
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    if not messages:
        return "messages: at least one message is required"
    for index, message in enumerate(messages):
        problem = _message_problem(index, message) or _pairing_problem(messages, index)
        if problem is not None:
            return problem
    return None


def _message_problem(index: int, message: Any) -> Optional[str]:
    where = f"messages.{index}"
    if not isinstance(message, dict):
        return f"{where}: Input should be a valid dictionary"
    for key in message:
        if key not in _MESSAGE_KEYS:
            return f"{where}.{key}: Extra inputs are not permitted"
    for key in ("role", "content"):
        if key not in message:
            return f"{where}.{key}: Field required"
    if message["role"] not in _ROLES:
        return f"{where}.role: Input should be 'user' or 'assistant'"
    content = message["content"]
    if not isinstance(content, (str, list)):
        return f"{where}.content: Input should be a valid string or a valid list"
    if isinstance(content, list):
        for position, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return f"{where}.content.{position}: Input should be a valid content block"
    return None


def _ids(message: Any, kind: str, key: str) -> List[Any]:
    """The ``key`` of every ``kind`` block of ``message`` (none for str content)."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b.get(key) for b in content if isinstance(b, dict) and b.get("type") == kind]


def _pairing_problem(messages: List[Any], index: int) -> Optional[str]:
    message = messages[index]
    if message["role"] == "assistant":
        uses = _ids(message, "tool_use", "id")
        if uses:
            following = messages[index + 1] if index + 1 < len(messages) else None
            answered: Set[Any] = set()
            if isinstance(following, dict) and following.get("role") == "user":
                answered = set(_ids(following, "tool_result", "tool_use_id"))
            missing = [str(i) for i in uses if i not in answered]
            if missing:
                return (f"messages.{index}: `tool_use` ids were found without `tool_result` "
                        f"blocks immediately after: {', '.join(missing)}. Each `tool_use` "
                        "block must have a corresponding `tool_result` block in the next "
                        "message.")
        return None
    results = _ids(message, "tool_result", "tool_use_id")
    if results:
        previous = messages[index - 1] if index > 0 else None
        asked: Set[Any] = set()
        if isinstance(previous, dict) and previous.get("role") == "assistant":
            asked = set(_ids(previous, "tool_use", "id"))
        unexpected = [str(i) for i in results if i not in asked]
        if unexpected:
            return (f"messages.{index}.content: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {', '.join(unexpected)}. Each `tool_result` "
                    "block must have a corresponding `tool_use` block in the previous "
                    "message.")
    return None


def count_tokens(body: Dict[str, Any]) -> int:
    """The mock's token count: 1 per 4 characters of the JSON of messages, system, tools."""
    counted = {key: body[key] for key in ("system", "messages", "tools") if key in body}
    text = json.dumps(counted, ensure_ascii=False, separators=(",", ":"))
    return max(1, len(text) // 4)
