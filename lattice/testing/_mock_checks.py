"""What ``MockMessagesServer`` refuses, as the real Messages and Chat Completions APIs
do, and count_tokens.

``request_problem`` returns the message of the 400 ``invalid_request_error`` the real API
would answer (in its wording, ``messages.N...`` paths included), or None for a request it
accepts. Only the refusals a client library can cause are checked: missing fields, empty
or malformed messages, broken tool_use/tool_result pairing, a missing version header.
Consecutive messages with the same role are accepted (the API merges them).

``chat_request_problem`` does the same for a Chat Completions body (OpenAI's wording and
``param``): an empty ``messages``, an unknown role, a ``tool`` message without a
``tool_call_id`` or without a preceding assistant ``tool_calls`` entry of that id, and
assistant ``tool_calls`` not answered before the next user or assistant message.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

__all__ = ["COUNT_TOKENS_PATH", "request_problem", "chat_request_problem", "count_tokens"]

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


_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
ChatProblem = Tuple[str, str, Optional[str]]  # message, param, code


def chat_request_problem(body: Any) -> Optional[ChatProblem]:
    """Why the real Chat Completions API would refuse this body (None when it would not):
    ``(message, param, code)`` of its 400 ``invalid_request_error``."""
    if not isinstance(body, dict):
        return ("request body must be a JSON object", "", None)
    messages = body.get("messages")
    if "messages" not in body:
        return ("Missing required parameter: 'messages'.", "messages",
                "missing_required_parameter")
    if not isinstance(messages, list):
        return (f"Invalid type for 'messages': expected an array, but got "
                f"{type(messages).__name__} instead.", "messages", "invalid_type")
    if not messages:
        return ("Invalid 'messages': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.", "messages", "empty_array")
    waiting: List[str] = []  # tool_call ids of the last assistant message, unanswered
    asked: Set[Any] = set()  # every id that assistant message asked for
    asker = -1  # index of that assistant message
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return (f"Invalid type for 'messages[{index}]': expected an object, but got "
                    f"{type(message).__name__} instead.", f"messages[{index}]", "invalid_type")
        role = message.get("role")
        if role not in _CHAT_ROLES:
            return (f"Invalid value: {role!r}. Supported values are: 'system', 'assistant', "
                    "'user', 'function', 'tool', and 'developer'.",
                    f"messages[{index}].role", "invalid_value")
        if role == "tool":
            problem = _tool_message_problem(index, message, asked, asker)
            if problem is not None:
                return problem
            if message["tool_call_id"] in waiting:
                waiting.remove(message["tool_call_id"])
            continue
        if waiting and role in ("user", "assistant"):
            return _unanswered(asker, waiting)
        if role == "assistant":
            calls = message.get("tool_calls") or []
            ids = [c.get("id") for c in calls if isinstance(c, dict)]
            waiting, asked, asker = [str(i) for i in ids], set(ids), index
        elif role == "user":
            asked, asker = set(), -1
    if waiting:
        return _unanswered(asker, waiting)
    return None


def _tool_message_problem(index: int, message: Dict[str, Any], asked: Set[Any],
                          asker: int) -> Optional[ChatProblem]:
    if "tool_call_id" not in message or message["tool_call_id"] is None:
        return (f"Missing required parameter: 'messages[{index}].tool_call_id'.",
                f"messages[{index}].tool_call_id", "missing_required_parameter")
    if asker < 0:
        return ("Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'.", f"messages[{index}].role", None)
    if message["tool_call_id"] not in asked:
        return (f"Invalid parameter: 'tool_call_id' of '{message['tool_call_id']}' not "
                "found in 'tool_calls' of previous message.",
                f"messages[{index}].tool_call_id", None)
    return None


def _unanswered(asker: int, waiting: List[str]) -> ChatProblem:
    return ("An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(waiting)}", f"messages.[{asker}].role", None)


def count_tokens(body: Dict[str, Any]) -> int:
    """The mock's token count: 1 per 4 characters of the JSON of messages, system, tools."""
    counted = {key: body[key] for key in ("system", "messages", "tools") if key in body}
    text = json.dumps(counted, ensure_ascii=False, separators=(",", ":"))
    return max(1, len(text) // 4)
