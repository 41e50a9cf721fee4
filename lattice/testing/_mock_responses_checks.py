"""What ``MockMessagesServer`` refuses on ``/v1/responses``, as the real Responses API does,
and the Messages-shaped view of a Responses request that scripts see.

``responses_problem`` returns ``(status, message, param, code)`` of the error the real API
would answer, in its wording, or None. Checked: unknown or missing parameters, the shape
of every ``input`` item and part, ``function_call`` / ``function_call_output`` pairing by
``call_id`` (both ways), a reasoning item with no item after it, reasoning sent back
without its ``encrypted_content`` when ``store`` is false, encrypted content this server
did not issue, function tools (names; strict schemas), ``text.format`` and
``max_output_tokens``. Reasoning ``encrypted_content`` is an HMAC of the item id under a
fixed key, so any mock can verify what another issued.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

__all__ = ["responses_problem", "responses_view", "encrypt", "Problem"]

Problem = Tuple[int, str, Optional[str], Optional[str]]

_PARAMS = frozenset([
    "model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "text",
    "stream", "store", "include", "reasoning", "previous_response_id", "temperature",
    "top_p", "parallel_tool_calls", "metadata", "truncation", "user", "service_tier",
    "background", "conversation", "prompt", "prompt_cache_key", "safety_identifier",
    "max_tool_calls", "top_logprobs", "stream_options", "prompt_cache_retention",
    "context_management"])
_INCLUDE = ("reasoning.encrypted_content", "message.output_text.logprobs",
            "message.input_image.image_url", "web_search_call.action.sources",
            "web_search_call.results", "code_interpreter_call.outputs",
            "computer_call_output.output.image_url", "file_search_call.results")
_ROLES = ("assistant", "system", "developer", "user")
_USER_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal")
# Items that answer (or come from) the user's side: never what a reasoning item precedes.
_USER_SIDE = ("function_call_output", "custom_tool_call_output", "computer_call_output",
              "mcp_approval_response", "local_shell_call_output")
_ITEMS = frozenset(("message", "function_call", "reasoning", "item_reference",
                    "web_search_call", "file_search_call", "computer_call",
                    "code_interpreter_call", "image_generation_call", "local_shell_call",
                    "mcp_list_tools", "mcp_approval_request", "mcp_call", "custom_tool_call",
                    "tool_search_call", "tool_search_output", "compaction",
                    "additional_tools", "shell_call", "shell_call_output", "apply_patch_call",
                    "apply_patch_call_output") + _USER_SIDE)
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_KEY = b"lattice-mock-responses"


def encrypt(item_id: str) -> str:
    """The ``encrypted_content`` this mock issues for reasoning item ``item_id``."""
    mac = hmac.new(_KEY, item_id.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"gAAAAB-mock-{mac}"


def _bad(param: str, message: str, code: Optional[str] = None) -> Problem:
    return 400, message, param, code


def responses_problem(body: Any) -> Optional[Problem]:
    if not isinstance(body, dict):
        return _bad("", "The request body must be a JSON object.")
    for key in body:
        if key not in _PARAMS:
            return _bad(key, f"Unknown parameter: '{key}'.", "unknown_parameter")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _bad("model", "Missing required parameter: 'model'.", "missing_required_parameter")
    tokens = body.get("max_output_tokens")
    if tokens is not None and (not isinstance(tokens, int) or tokens < 16):
        return _bad("max_output_tokens", "Invalid 'max_output_tokens': integer below minimum "
                    f"value. Expected a value >= 16, but got {tokens} instead.",
                    "integer_below_min_value")
    for name in ("stream", "store", "background", "parallel_tool_calls"):
        if name in body and body[name] is not None and not isinstance(body[name], bool):
            return _bad(name, f"Invalid type for '{name}': expected a boolean.",
                        "invalid_type")
    for value in body.get("include") or ():
        if value not in _INCLUDE:
            return _bad("include", f"Invalid value: '{value}'. Supported values are: "
                        + ", ".join(f"'{v}'" for v in _INCLUDE) + ".", "invalid_value")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, (str, list)):
        return _bad("instructions", "Invalid type for 'instructions': expected a string.")
    return _tools_problem(body.get("tools")) or _format_problem(body.get("text")) or \
        _input_problem(body.get("input"), body.get("store") is False)


def _tools_problem(tools: Any) -> Optional[Problem]:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return _bad("tools", "Invalid type for 'tools': expected an array of objects.")
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            return _bad(f"tools[{n}].type", f"Missing required parameter: 'tools[{n}].type'.")
        if tool["type"] != "function":
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            return _bad(f"tools[{n}].name", f"Invalid 'tools[{n}].name': string does not "
                        "match pattern. Expected a string that matches the pattern "
                        "'^[a-zA-Z0-9_-]+$'.", "invalid_value")
        schema = tool.get("parameters")
        if tool.get("strict", True) is True and isinstance(schema, dict):
            why = _strict_problem(schema, ())
            if why:
                return _bad(f"tools[{n}].parameters",
                            f"Invalid schema for function '{name}': {why}",
                            "invalid_function_parameters")
    return None


def _strict_problem(schema: Dict[str, Any], where: Tuple[str, ...]) -> Optional[str]:
    """Why a strict schema is refused (only the rules clients trip over)."""
    context = f"In context=({', '.join(repr(w) for w in where)})"
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return (f"{context}, 'additionalProperties' is required to be supplied and to "
                    "be false.")
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        for key in properties:
            if key not in required:
                return (f"{context}, 'required' is required to be supplied and to be an "
                        f"array including every key in properties. Missing '{key}'.")
        for key, sub in properties.items():
            if isinstance(sub, dict):
                why = _strict_problem(sub, where + ("properties", key))
                if why:
                    return why
    items = schema.get("items")
    if isinstance(items, dict):
        return _strict_problem(items, where + ("items",))
    return None


def _format_problem(text: Any) -> Optional[Problem]:
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict) or form.get("type") != "json_schema":
        return None
    if not isinstance(form.get("name"), str) or not form["name"]:
        return _bad("text.format.name", "Missing required parameter: 'text.format.name'.",
                    "missing_required_parameter")
    if not isinstance(form.get("schema"), dict):
        return _bad("text.format.schema", "Missing required parameter: "
                    "'text.format.schema'.", "missing_required_parameter")
    return None


def _input_problem(items: Any, unstored: bool) -> Optional[Problem]:
    if items is None or isinstance(items, str):
        return None
    if not isinstance(items, list):
        return _bad("input", "Invalid type for 'input': expected a string or an array.")
    calls: Set[Any] = set()
    answered: Set[Any] = set()
    for n, item in enumerate(items):
        problem = _item_problem(n, item, unstored)
        if problem is not None:
            return problem
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            if item["call_id"] not in calls:
                return _bad("input", "No tool call found for function call output with "
                            f"call_id {item['call_id']}.")
            answered.add(item["call_id"])
        elif kind == "reasoning":
            following = items[n + 1] if n + 1 < len(items) else None
            if not isinstance(following, dict) or following.get("type", "message") in \
                    _USER_SIDE or (following.get("type", "message") == "message"
                                   and following.get("role") != "assistant"):
                return _bad("input", f"Item '{item.get('id')}' of type 'reasoning' was "
                            "provided without its required following item.")
    for item in items:
        if item.get("type") == "function_call" and item["call_id"] not in answered:
            return _bad("input", f"No tool output found for function call {item['call_id']}.")
    return None


def _item_problem(n: int, item: Any, unstored: bool) -> Optional[Problem]:
    where = f"input[{n}]"
    if not isinstance(item, dict):
        return _bad(where, f"Invalid type for '{where}': expected an object.")
    kind = item.get("type", "message")
    if kind not in _ITEMS:
        return _bad(f"{where}.type", f"Invalid value: '{kind}'. Supported values are: "
                    "'message', 'function_call', 'function_call_output', 'reasoning', ...",
                    "invalid_value")
    if kind == "message":
        return _message_problem(where, item)
    if kind in ("function_call", "function_call_output"):
        needed = ("call_id", "name", "arguments") if kind == "function_call" else \
            ("call_id", "output")
        for key in needed:
            if key not in item or item[key] is None:
                return _bad(f"{where}.{key}", f"Missing required parameter: '{where}.{key}'.",
                            "missing_required_parameter")
        if not isinstance(item["call_id"], str) or (
                kind == "function_call" and not isinstance(item["arguments"], str)):
            return _bad(where, f"Invalid type for '{where}': call_id and arguments must be "
                        "strings.", "invalid_type")
    if kind == "reasoning":
        if not isinstance(item.get("summary"), list):
            return _bad(f"{where}.summary", f"Missing required parameter: '{where}.summary'.",
                        "missing_required_parameter")
        secret = item.get("encrypted_content")
        if secret is None and unstored:
            return (404, f"Item with id '{item.get('id')}' not found. Items are not persisted "
                    "when `store` is set to false. Try again with `store` set to true, or "
                    "remove this item from your input.", "input", None)
        if secret is not None and secret != encrypt(str(item.get("id"))):
            return _bad(where, f"The encrypted content for item {item.get('id')} could not "
                        "be verified.", "invalid_encrypted_content")
    return None


def _message_problem(where: str, item: Dict[str, Any]) -> Optional[Problem]:
    role = item.get("role")
    if role not in _ROLES:
        return _bad(f"{where}.role", f"Invalid value: '{role}'. Supported values are: "
                    "'assistant', 'system', 'developer', and 'user'.", "invalid_value")
    content = item.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return _bad(f"{where}.content", f"Missing required parameter: '{where}.content'.",
                    "missing_required_parameter")
    allowed = _ASSISTANT_PARTS if role == "assistant" else _USER_PARTS
    for m, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            supported = " and ".join(f"'{a}'" for a in allowed)
            return _bad(f"{where}.content[{m}]", f"Invalid value: '{kind}'. Supported values "
                        f"are: {supported}.", "invalid_value")
        if kind in ("input_text", "output_text") and not isinstance(part.get("text"), str):
            return _bad(f"{where}.content[{m}].text", "Missing required parameter: "
                        f"'{where}.content[{m}].text'.", "missing_required_parameter")
        if kind == "input_image" and not (part.get("image_url") or part.get("file_id")):
            return _bad(f"{where}.content[{m}]", "Missing required parameter: "
                        f"'{where}.content[{m}].image_url'.", "missing_required_parameter")
    return None


# -- the request as a script written for the Messages API sees it ---------------------------


def responses_view(body: Mapping[str, Any]) -> Dict[str, Any]:
    """A Responses request body in Messages shape: ``instructions`` -> ``system``, input
    items -> messages (function calls as ``tool_use``, outputs as ``tool_result``),
    function tools -> ``{"name", "description", "input_schema"}``."""
    view = {k: v for k, v in body.items() if k not in ("input", "tools", "instructions")}
    if body.get("instructions") is not None:
        view["system"] = body["instructions"]
    messages: List[Dict[str, Any]] = []
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or ():
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in ("system", "developer"):
            view.setdefault("system", _text(item.get("content")))
        elif kind == "message":
            role = "assistant" if item.get("role") == "assistant" else "user"
            content = item.get("content")
            _add(messages, role, content if isinstance(content, str) and role == "user"
                 else [{"type": "text", "text": _text(content)}])
        elif kind == "function_call":
            try:
                arguments = json.loads(item.get("arguments") or "{}")
            except ValueError:
                arguments = item.get("arguments")
            _add(messages, "assistant", [{"type": "tool_use", "id": item.get("call_id"),
                                          "name": item.get("name"), "input": arguments}])
        elif kind == "function_call_output":
            output = item.get("output")
            _add(messages, "user", [{"type": "tool_result", "tool_use_id": item.get("call_id"),
                                     "content": output if isinstance(output, str)
                                     else _text(output)}])
    view["messages"] = messages
    view["tools"] = [{"name": t.get("name"), "description": t.get("description", ""),
                      "input_schema": t.get("parameters", {})}
                     for t in body.get("tools") or () if t.get("type") == "function"]
    return view


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


def _add(messages: List[Dict[str, Any]], role: str, content: Any) -> None:
    last = messages[-1] if messages else None
    if last is not None and last["role"] == role and isinstance(content, list) and \
            isinstance(last["content"], list):
        last["content"] = last["content"] + content
    else:
        messages.append({"role": role, "content": content})
