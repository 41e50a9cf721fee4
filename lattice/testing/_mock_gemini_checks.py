"""What the Gemini routes of ``MockMessagesServer`` refuse, as Google does (no I/O).

``gemini_problem(body, model, issued)`` returns ``(status, message, google_status)`` for a
request the service would refuse, else None:

* an unknown field anywhere Google knows the shape (request, content, part, inline and
  file data, function call and response, tool, function declaration, generation config,
  thinking config): 400 ``Invalid JSON payload received. Unknown name "x" at 'path':
  Cannot find field.`` (snake_case names are accepted, as by Google);
* a role other than ``user``/``model``, a content without parts, a part without data;
* a ``gemini-3*`` model's function call in the current turn (the model turns after the
  last user turn with text) whose turn has no ``thoughtSignature`` on its first function
  call, or a signature the mock never issued (the documented placeholder passes): 400
  with Google's text.
"""

from __future__ import annotations

import re
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

__all__ = ["gemini_problem", "PLACEHOLDER", "MISSING_SIGNATURE", "camel_name"]

PLACEHOLDER = "skip_thought_signature_validator"
MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {position}."
    " Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more "
    "details.")

Problem = Tuple[int, str, str]


def _names(*names: str) -> FrozenSet[str]:
    return frozenset(names)


_REQUEST = _names("contents", "systemInstruction", "tools", "toolConfig", "generationConfig",
                  "safetySettings", "cachedContent", "labels", "modelArmorConfig")
_CONTENT = _names("role", "parts")
_PART = _names("text", "thought", "thoughtSignature", "inlineData", "fileData",
               "functionCall", "functionResponse", "executableCode", "codeExecutionResult",
               "videoMetadata", "toolCall", "toolResponse", "partMetadata", "mediaResolution")
_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse",
         "executableCode", "codeExecutionResult", "toolCall", "toolResponse")
_SHAPES: Dict[str, FrozenSet[str]] = {
    "inlineData": _names("mimeType", "data", "displayName"),
    "fileData": _names("mimeType", "fileUri", "displayName"),
    "functionCall": _names("id", "name", "args", "partialArgs", "willContinue"),
    "functionResponse": _names("id", "name", "response", "parts", "willContinue",
                               "scheduling"),
}
_TOOL = _names("functionDeclarations", "googleSearch", "googleSearchRetrieval",
               "codeExecution", "urlContext", "fileSearch", "googleMaps", "retrieval",
               "computerUse", "enterpriseWebSearch")
_DECLARATION = _names("name", "description", "parameters", "parametersJsonSchema",
                      "response", "responseJsonSchema", "behavior")
_CONFIG = _names("maxOutputTokens", "temperature", "topP", "topK", "candidateCount",
                 "stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema",
                 "thinkingConfig", "responseModalities", "seed", "presencePenalty",
                 "frequencyPenalty", "responseLogprobs", "logprobs", "mediaResolution",
                 "speechConfig", "imageConfig", "enableEnhancedCivicAnswers")
_THINKING = _names("includeThoughts", "thinkingBudget", "thinkingLevel")


def camel_name(name: str) -> str:
    """A proto field name as its JSON (camelCase) name: Google takes both."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _unknown(value: Any, allowed: FrozenSet[str], where: str) -> Optional[Problem]:
    if not isinstance(value, dict):
        return (400, f"Invalid value at '{where}', must be an object.", "INVALID_ARGUMENT")
    for key in value:
        if camel_name(key) not in allowed:
            return (400, f"Invalid JSON payload received. Unknown name \"{key}\" at "
                         f"'{where}': Cannot find field.", "INVALID_ARGUMENT")
    return None


def _get(value: Dict[str, Any], name: str) -> Any:
    """``value[name]``, under its camelCase or snake_case name."""
    if name in value:
        return value[name]
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)
    return value.get(snake)


def gemini_problem(body: Any, model: str, issued: Set[str]) -> Optional[Problem]:
    """Why Google would refuse ``body`` for ``model`` (``issued``: signatures the mock
    gave), or None."""
    found = _unknown(body, _REQUEST, "")
    if found is not None:
        return found
    contents = _get(body, "contents")
    if not isinstance(contents, list) or not contents:
        return (400, "* GenerateContentRequest.contents: contents is not specified\n",
                "INVALID_ARGUMENT")
    for n, content in enumerate(contents):
        found = _content(content, f"contents[{n}]")
        if found is not None:
            return found
    system = _get(body, "systemInstruction")
    if system is not None:
        found = _content(system, "system_instruction", system=True)
        if found is not None:
            return found
    tools = _get(body, "tools")
    for n, tool in enumerate([tools] if isinstance(tools, dict) else tools or ()):
        found = _unknown(tool, _TOOL, f"tools[{n}]")
        for m, declaration in enumerate(_get(tool, "functionDeclarations") or ()
                                        if found is None else ()):
            found = found or _unknown(declaration, _DECLARATION,
                                      f"tools[{n}].function_declarations[{m}]")
        if found is not None:
            return found
    config = _get(body, "generationConfig")
    if config is not None:
        found = _unknown(config, _CONFIG, "generation_config")
        thinking = _get(config, "thinkingConfig") if found is None else None
        if found is None and thinking is not None:
            found = _unknown(thinking, _THINKING, "generation_config.thinking_config")
        if found is not None:
            return found
        tokens = _get(config, "maxOutputTokens")
        if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)
                                   or tokens < 1):
            return (400, "* GenerateContentRequest.generation_config.max_output_tokens: "
                         "max_output_tokens must be positive.\n", "INVALID_ARGUMENT")
    if model.startswith("gemini-3"):
        return _signature_problem(contents, issued)
    return None


def _content(content: Any, where: str, *, system: bool = False) -> Optional[Problem]:
    found = _unknown(content, _CONTENT, where)
    if found is not None:
        return found
    role = content.get("role")
    if not system and role not in ("user", "model"):
        return (400, "Please use a valid role: user, model.", "INVALID_ARGUMENT")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        return (400, f"* GenerateContentRequest.{where}.parts: contents.parts must not be "
                     "empty.\n", "INVALID_ARGUMENT")
    for n, part in enumerate(parts):
        found = _unknown(part, _PART, f"{where}.parts[{n}]")
        if found is not None:
            return found
        data = [camel_name(k) for k in part if camel_name(k) in _DATA]
        if len(data) != 1:
            return (400, f"* GenerateContentRequest.{where}.parts[{n}].data: required oneof "
                         "field 'data' must have one initialized field\n", "INVALID_ARGUMENT")
        shape = _SHAPES.get(data[0])
        if shape is not None:
            found = _unknown(_get(part, data[0]), shape, f"{where}.parts[{n}].{data[0]}")
            if found is not None:
                return found
    return None


def _signature_problem(contents: List[Dict[str, Any]], issued: Set[str]) -> Optional[Problem]:
    """Gemini 3: each model turn of the current turn signs its first function call."""
    start = 0
    for n, content in enumerate(contents):
        if content.get("role") == "user" and any(
                "text" in p or "inlineData" in p or "fileData" in p
                or "inline_data" in p or "file_data" in p for p in content["parts"]):
            start = n
    position = 0
    for content in contents[start:]:
        if content.get("role") != "model":
            continue
        calls = [p for p in content["parts"] if _get(p, "functionCall") is not None]
        for part in content["parts"]:
            position += 1
            if not calls or part is not calls[0]:
                continue
            signature = _get(part, "thoughtSignature")
            if signature != PLACEHOLDER and signature not in issued:
                name = _get(part, "functionCall").get("name")
                return (400, MISSING_SIGNATURE.format(name=name, position=position),
                        "INVALID_ARGUMENT")
    return None
