"""Gemini replies -> the assistant dict clients return, without any I/O.

A reply is one ``GenerateContentResponse`` or, streamed, a series of them (SSE ``data:``
events or the items of one JSON array), each carrying the next parts of the first
candidate. ``GeminiReply.feed(chunk)`` takes them in order; ``message()`` builds the reply:

* parts: a chunk's first text part continues the previous chunk's last one when both are
  plain text of the same kind (thought or not) and not both carry a signature (Google
  sends a text's signature on its first or on its last piece), so a streamed text is one
  part with its signature, as a whole reply has it; any other part is kept as it came.
* content: text parts are text blocks, ``thought: true`` parts a ``thinking`` block (for
  display), ``functionCall`` parts ``tool_use`` blocks (the model's ``id``, else one made
  from the response id and the part's index, never sent back as ``id``).
* ``gemini_parts`` (``gemini_wire.py`` says how it goes back): kept when a part carries
  what the blocks do not (a signature, a thought, code execution) and whenever the reply
  has a function call (whether its id was the model's; its turn is not foreign history).
* ``stop_reason``: ``STOP`` -> ``end_turn`` (``tool_use`` with calls), ``MAX_TOKENS`` ->
  ``max_tokens``, the safety family and a blocked prompt -> ``refusal`` with a text saying
  why, ``MALFORMED_FUNCTION_CALL``/``UNEXPECTED_TOOL_CALL`` without a call to answer ->
  ``malformed_function_call`` (the loop asks the model to call again). Vertex's numeric
  enums (``enum-encoding=int``) read as their names.
* usage, field by field from the last chunk that carried the field.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..errors import APIConnectionError
from ..messages import MAX_DEPTH, too_deep
from ..usage import token_count
from .base import MALFORMED_CALL
from .chat_reply import new_call_id
from .gemini_wire import PARTS_KEY

__all__ = ["GeminiReply", "reply_from_gemini", "usage_from_gemini", "MALFORMED_CALL",
           "FINISH_REASONS", "BLOCK_REASONS"]


# Vertex's FinishReason and BlockedReason numbers (``$alt=json;enum-encoding=int``).
FINISH_REASONS = ("FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION",
                  "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                  "MALFORMED_FUNCTION_CALL", "MODEL_ARMOR", "IMAGE_SAFETY",
                  "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "IMAGE_OTHER",
                  "UNEXPECTED_TOOL_CALL", "NO_IMAGE")  # 0-16, as aiplatform.v1 numbers them
BLOCK_REASONS = ("BLOCKED_REASON_UNSPECIFIED", "SAFETY", "OTHER", "BLOCKLIST",
                 "PROHIBITED_CONTENT", "MODEL_ARMOR", "IMAGE_SAFETY", "JAILBREAK")
_REFUSED = frozenset(["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                      "MODEL_ARMOR", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT",
                      "IMAGE_RECITATION", "LANGUAGE"])
_MALFORMED = frozenset(["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL",
                        "TOO_MANY_TOOL_CALLS"])
_TEXT_KEYS = frozenset(["text", "thought", "thoughtSignature"])
_USAGE = ("promptTokenCount", "cachedContentTokenCount", "candidatesTokenCount",
          "thoughtsTokenCount")


def _name(value: Any, names: Tuple[str, ...]) -> Optional[str]:
    """An enum as its name (Vertex may send the number)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return names[value] if 0 <= value < len(names) else str(value)
    return value if isinstance(value, str) and value else None


class GeminiReply:
    """Feed it response chunks in order; ``message()`` gives the assistant dict."""

    __slots__ = ("parts", "_tail", "finish", "finish_message", "blocked", "usage",
                 "response_id", "model", "chunks")

    def __init__(self) -> None:
        self.parts: List[Dict[str, Any]] = []
        # texts continuing parts[-1], joined once (_join_tail): adding each chunk's text to
        # the part itself would copy the whole text so far at every event
        self._tail: List[str] = []
        self.finish: Optional[str] = None
        self.finish_message: Optional[str] = None
        self.blocked: Optional[Tuple[str, str]] = None  # (blockReason, its message)
        self.usage: Dict[str, Any] = {}
        self.response_id: Optional[str] = None
        self.model: Optional[str] = None
        self.chunks = 0

    def feed(self, chunk: Any) -> bool:
        """Apply one ``GenerateContentResponse`` (an error object raises); whether it
        moved the reply on (a part, a finish or block reason: what an idle limit counts;
        an empty chunk or a repeated usage does not)."""
        if not isinstance(chunk, dict):
            raise APIConnectionError(f"a reply chunk is not a JSON object: {str(chunk)[:200]!r}")
        if isinstance(chunk.get("error"), dict):
            from .gemini_status import error_from_gemini

            code = chunk["error"].get("code")  # a proxy may send it as text: "503"
            status = int(code) if isinstance(code, (int, str)) and str(code).isdigit() else 0
            raise error_from_gemini(status if 400 <= status < 600 else 500, chunk)
        self.chunks += 1
        for key, field in (("responseId", "response_id"), ("modelVersion", "model")):
            value = chunk.get(key)
            if isinstance(value, str) and value:
                setattr(self, field, value)
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if v is not None})
        feedback = chunk.get("promptFeedback")
        if isinstance(feedback, dict):
            reason = _name(feedback.get("blockReason"), BLOCK_REASONS)
            if reason:
                self.blocked = (reason, str(feedback.get("blockReasonMessage") or ""))
        candidates = chunk.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return self.blocked is not None
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            raise APIConnectionError(f"a candidate is not a JSON object: {str(candidate)[:200]!r}")
        finish = _name(candidate.get("finishReason"), FINISH_REASONS)
        if finish:
            self.finish = finish
        moved = bool(finish)
        if isinstance(candidate.get("finishMessage"), str):
            self.finish_message = candidate["finishMessage"]
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for n, part in enumerate(parts if isinstance(parts, list) else ()):
            if not isinstance(part, dict):
                raise APIConnectionError(f"a part is not a JSON object: {str(part)[:200]!r}")
            moved = True
            last = self.parts[-1] if self.parts and n == 0 else None
            if last is not None and _continues(last, part):
                self._tail.append(part.get("text", ""))
                if "thoughtSignature" in part:
                    last["thoughtSignature"] = part["thoughtSignature"]
            else:
                self._join_tail()
                self.parts.append(dict(part))
        return moved

    def _join_tail(self) -> None:
        if self._tail:
            self.parts[-1]["text"] += "".join(self._tail)
            self._tail = []

    def release(self) -> None:
        """Drop what was gathered (a failed stream: nothing of it is used)."""
        self.parts, self._tail = [], []

    def message(self) -> Dict[str, Any]:
        """The assistant dict; ``APIConnectionError`` if no chunk came."""
        if not self.chunks:
            raise APIConnectionError("the reply ended before any response chunk")
        self._join_tail()
        if too_deep(self.parts, MAX_DEPTH - 3):
            raise APIConnectionError(f"the reply's parts are nested deeper than {MAX_DEPTH} "
                                     "levels; refused")
        if not self.parts and self.finish is None and self.blocked is None:
            raise APIConnectionError("the reply had no content")  # a gateway's {}
        content, kept, needed = _content(self.parts, self.response_id)
        calls = any(b["type"] == "tool_use" for b in content)
        finish = self.finish
        stop = "tool_use" if calls else "end_turn"
        if self.blocked is not None and not content:
            reason, why = self.blocked
            content = [{"type": "text", "text": f"The prompt was blocked ({reason})"
                        + (f": {why}" if why else ".")}]
            stop = "refusal"
        elif finish == "MAX_TOKENS":
            stop = "max_tokens"
        elif finish in _REFUSED:
            stop = "refusal"
            if not any(b["type"] == "text" for b in content):
                content.append({"type": "text", "text": f"The reply was blocked ({finish})"
                                + (f": {self.finish_message}" if self.finish_message
                                   else ".")})
        elif finish in _MALFORMED and not calls:
            stop = MALFORMED_CALL
            if not any(b["type"] == "text" for b in content):
                content.append({"type": "text", "text": self.finish_message
                                or f"({finish}: the function call could not be read)"})
        reply: Dict[str, Any] = {"role": "assistant", "content": content, "stop_reason": stop,
                                 "usage": usage_from_gemini(self.usage), "model": self.model,
                                 "provider_response_id": self.response_id}
        if needed:
            reply[PARTS_KEY] = kept
        return reply


def _continues(last: Dict[str, Any], part: Dict[str, Any]) -> bool:
    """``part`` (a chunk's first) is the rest of ``last`` (the previous chunk's last)."""
    return ("text" in part and "text" in last
            and not ("thoughtSignature" in last and "thoughtSignature" in part)
            and part.keys() <= _TEXT_KEYS and last.keys() <= _TEXT_KEYS
            and bool(part.get("thought")) == bool(last.get("thought")))


def _content(parts: List[Dict[str, Any]], response_id: Optional[str]
             ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], bool]:
    """(content blocks, ``gemini_parts`` entries, whether those are needed)."""
    blocks: List[Dict[str, Any]] = []
    thinking: List[str] = []
    kept: List[Dict[str, Any]] = []
    needed = False
    for index, part in enumerate(parts):
        signed = {"thoughtSignature": part["thoughtSignature"]} \
            if "thoughtSignature" in part else {}
        if part.get("thought") is True:
            if isinstance(part.get("text"), str) and part["text"]:
                thinking.append(part["text"])
            kept.append(part)
            needed = True
        elif isinstance(part.get("text"), str) and part.keys() <= _TEXT_KEYS and part["text"]:
            blocks.append({"type": "text", "text": part["text"]})
            kept.append({"part": "text", **signed})
            needed = needed or bool(signed)
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            name = call.get("name")
            if not isinstance(name, str) or not name:
                raise APIConnectionError("the reply has a function call without a name")
            given = call.get("id") if isinstance(call.get("id"), str) and call["id"] else None
            block_id = given or (f"{response_id}_{index}" if response_id else new_call_id())
            args = call.get("args")
            blocks.append({"type": "tool_use", "id": block_id, "name": name,
                           "input": args if isinstance(args, dict) else {}})
            entry: Dict[str, Any] = {"part": "functionCall", "call": block_id, **signed}
            if given:
                entry["id"] = given
            kept.append(entry)
            needed = True  # its id (given or not) and signature: never "foreign" history
        elif part.keys() == {"text"}:
            continue  # an empty text: nothing to show or send back
        else:  # code execution, server tool calls, media, an empty signed text
            kept.append(part)
            needed = True
    if thinking:
        blocks.insert(0, {"type": "thinking", "thinking": "".join(thinking)})
    return blocks, kept, needed


def usage_from_gemini(usage: Dict[str, Any]) -> Dict[str, int]:
    """``usageMetadata`` as lattice usage: cached input as cache reads, thinking tokens
    counted as output (and shown apart as ``reasoning_tokens``)."""
    prompt, cached, candidates, thoughts = (token_count(usage.get(k)) for k in _USAGE)
    return {"input_tokens": max(0, prompt - cached),
            "output_tokens": candidates + thoughts, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "reasoning_tokens": thoughts}


def reply_from_gemini(body: Any) -> Dict[str, Any]:
    """A whole ``GenerateContentResponse`` (or a JSON array of streamed ones) as the
    assistant dict."""
    reply = GeminiReply()
    for chunk in body if isinstance(body, list) else [body]:
        reply.feed(chunk)
    return reply.message()

