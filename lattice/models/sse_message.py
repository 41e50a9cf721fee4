"""Assembling the Messages API message from its streamed event dicts, without any I/O.

``MessageAccumulator.feed(event)`` applies one event (as ``sse.parse_stream`` and Bedrock's
event-stream reader decode them); ``message()`` gives the message object. Fields of the
wrong type are ``APIConnectionError`` naming the field (SPEC 16a).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from ..errors import APIConnectionError
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import ReplyBudget
from .shape import MAX_DEPTH, malformed, optional
from .wire import error_from_body

__all__ = ["MessageAccumulator"]

# Deltas whose payload is appended to a field of the block, as (payload key, block field).
# text_delta is handled first, on its own, in MessageAccumulator.feed.
_APPENDING_DELTAS = {
    "thinking_delta": ("thinking", "thinking"),
    "input_json_delta": ("partial_json", "input"),
    "compaction_delta": ("content", "content"),
}


class _Block:
    """A content block as ``content_block_start`` gave it, plus the deltas seen since."""

    __slots__ = ("block", "text", "parts", "citations", "signature")

    def __init__(self, block: Dict[str, Any]) -> None:
        self.block = dict(block)  # a copy: the caller's event dict stays as it was
        self.text: List[str] = []  # text_delta, by far the most common, has its own list
        self.parts: Dict[str, List[str]] = {}
        self.citations: Optional[List[Any]] = None
        self.signature: Optional[str] = None

    def finish(self, stop_reason: Optional[str]) -> Dict[str, Any]:
        block = self.block
        if self.text:
            block["text"] = self._start("text", str) + "".join(self.text)
        for name, parts in self.parts.items():
            joined = "".join(parts)
            if name == "input":
                block["input"] = _tool_input(joined, block, stop_reason)
            else:
                block[name] = self._start(name, str) + joined
        if self.citations is not None:
            block["citations"] = list(self._start("citations", list)) + self.citations
        if self.signature is not None:
            block["signature"] = self.signature
        return block

    def _start(self, name: str, kind: type) -> Any:
        """What content_block_start gave for ``name``, which deltas extend."""
        value = self.block.get(name) or kind()
        if not isinstance(value, kind):
            raise malformed(f"content_block_start.content_block.{name}", value,
                            "a string" if kind is str else "a list")
        return value


def _tool_input(text: str, block: Dict[str, Any], stop_reason: Optional[str]) -> Any:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except RecursionError:
        raise APIConnectionError(f"malformed reply: the tool input of block {block.get('id')!r} "
                                 f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        if stop_reason == "max_tokens":
            # The reply was cut mid-call. The loop never runs such a call (it answers it
            # with an error), and ``{}`` keeps the block valid to send back next turn.
            return {}
        raise APIConnectionError(
            f"malformed tool input JSON in stream for block {block.get('id')!r}: {text[:200]!r}"
        ) from None
    return value


class MessageAccumulator:
    """Builds the Messages API message object from streamed event dicts.

    Unknown event, block and delta types are ignored: a block stays as
    ``content_block_start`` gave it plus the deltas we understand. Usage starts from
    ``message_start`` and every non-null field of a ``message_delta`` usage replaces the
    value so far (they are running totals, not increments). What the blocks hold counts
    against ``budget`` (SPEC 21b: the reply is bounded as a whole); ``release()`` drops
    it all once the stream failed.
    """

    __slots__ = ("_message", "_blocks", "_usage", "_budget", "done")

    def __init__(self, budget: Optional[ReplyBudget] = None) -> None:
        self._message: Dict[str, Any] = {}
        self._blocks: Dict[Any, _Block] = {}
        self._usage: Dict[str, Any] = {}
        self._budget = ReplyBudget(DEFAULT_MAX_RESPONSE_BYTES) if budget is None else budget
        self.done = False

    def release(self) -> None:
        """Drop what was gathered (a failed stream: nothing of it is used), in place: the
        traceback's frames may hold a block."""
        for block in self._blocks.values():
            block.text.clear()
            block.parts.clear()
            block.block.clear()
            block.citations = None
        self._blocks.clear()
        self._message, self._usage = {}, {}

    def feed(self, event: Dict[str, Any]) -> None:
        """Apply one event; raise the matching API error for an ``error`` event."""
        kind = event.get("type")
        if kind == "content_block_delta":
            try:
                block = self._blocks.get(event.get("index"))
            except TypeError:  # an unhashable index
                raise malformed("content_block_delta.index", event.get("index"),
                                "an integer") from None
            delta: Any = event.get("delta")
            if block is not None:
                try:
                    kind = delta.get("type")
                except AttributeError:  # (a try costs nothing here; a check per token did)
                    raise malformed("content_block_delta.delta", delta, "an object") from None
                if kind == "text_delta":
                    text = delta.get("text")
                    if not isinstance(text, str):
                        raise malformed("text_delta.text", text, "a string")
                    self._budget.take(text)
                    block.text.append(text)
                else:
                    _apply_delta(block, delta, self._budget)
        elif kind == "content_block_start":
            self._block_start(event)
        elif kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise malformed("message_start.message", message, "an object")
            self._budget.take_value(message)
            self._start(message)
        elif kind == "message_delta":
            self._budget.progress()
            self._message_delta(event)
        elif kind == "message_stop":
            self._budget.progress()
            self.done = True
        elif kind == "error":
            raise error_from_body(event, "stream error event: {type}", event.get("request_id"))
        # ping, content_block_stop and unknown events change nothing

    def _block_start(self, event: Dict[str, Any]) -> None:
        block = event.get("content_block")
        if not isinstance(block, dict):
            raise malformed("content_block_start.content_block", block, "an object")
        index = event.get("index", len(self._blocks))
        if not isinstance(index, (int, str)):
            raise malformed("content_block_start.index", index, "an integer")
        self._budget.take_value(block)
        self._blocks[index] = _Block(block)

    def _start(self, message: Dict[str, Any]) -> None:
        self._message = {k: v for k, v in message.items() if k not in ("content", "usage")}
        usage = optional(message.get("usage"), dict, "message_start.message.usage",
                         "an object")
        self._usage = dict(usage or {})
        content = optional(message.get("content"), list, "message_start.message.content",
                           "a list")
        for index, block in enumerate(content or ()):
            if not isinstance(block, dict):
                raise malformed(f"message_start.message.content[{index}]", block, "an object")
            self._blocks[index] = _Block(block)

    def _message_delta(self, event: Dict[str, Any]) -> None:
        delta = optional(event.get("delta"), dict, "message_delta.delta", "an object")
        if delta is not None:
            for key in ("stop_reason", "stop_sequence"):
                if key in delta:
                    self._message[key] = delta[key]
        usage = optional(event.get("usage"), dict, "message_delta.usage", "an object")
        if usage is not None:
            for key, value in usage.items():
                if value is not None:
                    self._usage[key] = value

    def message(self) -> Dict[str, Any]:
        """The finished message object; ``APIConnectionError`` if the stream was cut."""
        if not self.done:
            raise APIConnectionError("the stream ended before message_stop")
        stop_reason = self._message.get("stop_reason")
        message = dict(self._message)
        message["content"] = [
            self._blocks[index].finish(stop_reason) for index in sorted(self._blocks, key=_order)
        ]
        message["usage"] = dict(self._usage)
        return message


def _apply_delta(block: _Block, delta: Dict[str, Any], budget: ReplyBudget) -> None:
    kind = delta.get("type")
    if not isinstance(kind, str):
        raise malformed("content_block_delta.delta.type", kind, "a string")
    appending = _APPENDING_DELTAS.get(kind)
    if appending is not None:
        key, name = appending
        value = delta.get(key)
        if not isinstance(value, str):
            raise malformed(f"{kind}.{key}", value, "a string")
        budget.take(value)
        block.parts.setdefault(name, []).append(value)
    elif kind == "signature_delta":  # sent whole: the last one wins
        block.signature = optional(delta.get("signature"), str, "signature_delta.signature",
                                   "a string")
        budget.take(block.signature or "")
    elif kind == "citations_delta":
        if block.citations is None:
            block.citations = []
        budget.take_value(delta.get("citation"))
        block.citations.append(delta.get("citation"))


def _order(index: Any) -> Any:
    return (0, index) if isinstance(index, int) else (1, str(index))
