"""Chat Completions streaming: ``chat.completion.chunk`` events -> one assistant dict.

The SSE layers are the shared ones (``sse.iter_lines``, ``SSEDecoder``, ``load_data``);
this module only assembles chunks. What real servers send, and we accept:

* content deltas as strings, or (Mistral) lists of text and thinking parts; reasoning as
  ``reasoning_content`` or ``reasoning``;
* tool-call fragments joined by ``index``, which may repeat the id and name in every
  fragment, omit ``arguments`` or send ``arguments: null``;
* usage in a last chunk with empty ``choices`` (``stream_options.include_usage``) or on
  the chunk with the ``finish_reason`` (the last one seen wins);
* ``data: [DONE]`` ends the stream; a stream that ends with ``[DONE]`` but no
  ``finish_reason`` is complete (stop reason ``tool_use`` if calls came, else
  ``end_turn``); one cut before both raises ``APIConnectionError``;
* an ``error`` object in a chunk (or an ``event: error``) raises the error it names.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, List, Optional

from ..errors import APIConnectionError
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import ReplyBudget, budget_of
from .chat_wire import (
    assemble,
    call_block,
    content_parts,
    error_from_chat,
    finished,
    stop_reason_from_finish,
)
from .shape import malformed, no_content, optional
from .sse import json_scanner, load_data, sse_events

__all__ = ["ChatStreamAccumulator", "parse_chat_stream"]


class _Call:
    __slots__ = ("id", "name", "parts")

    def __init__(self) -> None:
        self.id: Any = None
        self.name: Any = None
        self.parts: List[str] = []


class ChatStreamAccumulator:
    """Feed it chunk dicts in order; ``reply()`` gives the assistant dict. What it keeps
    counts against ``budget`` (SPEC 21b); ``release()`` drops it once the stream failed."""

    __slots__ = ("_texts", "_reasoning", "_calls", "_refusal", "_finish", "_usage", "_head",
                 "_budget", "done")

    def __init__(self, budget: Optional[ReplyBudget] = None) -> None:
        self._budget = ReplyBudget(DEFAULT_MAX_RESPONSE_BYTES) if budget is None else budget
        self._texts: List[str] = []
        self._reasoning: List[str] = []
        self._calls: Dict[Any, _Call] = {}
        self._refusal: List[str] = []
        self._finish: Any = None
        self._usage: Any = None
        self._head: Dict[str, Any] = {}  # id and model, from the first chunk naming them
        self.done = False  # [DONE] seen

    def release(self) -> None:
        """Drop what was gathered (a failed stream: nothing of it is used), in place: the
        traceback's frames may hold a list."""
        for call in self._calls.values():
            call.parts.clear()
        for gathered in (self._texts, self._reasoning, self._refusal, self._calls):
            gathered.clear()

    def feed(self, chunk: Dict[str, Any]) -> None:
        """Apply one chunk; raise the error an ``error`` object names."""
        if chunk.get("error"):
            raise error_from_chat(chunk["error"])
        if not self._head.get("id") and chunk.get("id"):
            self._head["id"] = chunk["id"]
        if not self._head.get("model") and chunk.get("model"):
            self._head["model"] = chunk["model"]
        usage = chunk.get("usage")
        if usage:
            self._usage = usage  # its type is checked once, in reply()
        choices = chunk.get("choices")
        if not choices:
            return
        try:
            choice = choices[0]
        except (TypeError, KeyError):  # not a list (a try costs nothing; a check per chunk did)
            raise malformed("chunk choices", choices, "a list") from None
        if not isinstance(choice, dict):
            raise malformed("chunk choices[0]", choice, "an object")
        if choice.get("index", 0) not in (0, None):
            return  # we never ask for n > 1
        delta = choice.get("delta")
        if delta:
            try:
                content = delta.get("content")
            except AttributeError:
                raise malformed("chunk choices[0].delta", delta, "an object") from None
            if content:
                if isinstance(content, str):
                    self._budget.take(content)
                    self._texts.append(content)
                else:
                    self._budget.take_value(content)
                    content_parts(content, self._texts, self._reasoning,
                                  "chunk choices[0].delta.content")
            if len(delta) > 1 or content is None:
                self._other(delta)
        finish = choice.get("finish_reason")
        if finish:
            self._budget.progress()
            self._finish = optional(finish, str, "chunk choices[0].finish_reason", "a string")

    def _other(self, delta: Dict[str, Any]) -> None:
        for key in ("reasoning_content", "reasoning"):
            value = delta.get(key)
            if isinstance(value, str):
                self._budget.take(value)
                self._reasoning.append(value)
                break
        refusal = delta.get("refusal")
        if isinstance(refusal, str):
            self._budget.take(refusal)
            self._refusal.append(refusal)
        fragments = optional(delta.get("tool_calls"), list, "chunk choices[0].delta.tool_calls",
                             "a list")
        for position, fragment in enumerate(fragments or ()):
            if not isinstance(fragment, dict):
                raise malformed(f"chunk choices[0].delta.tool_calls[{position}]", fragment,
                                "an object")
            self._fragment(fragment, position)
        legacy = delta.get("function_call")
        if isinstance(legacy, dict) and (legacy.get("name") or "legacy" in self._calls):
            self._merge(self._calls.setdefault("legacy", _Call()), None, legacy, self._budget)

    def _fragment(self, fragment: Dict[str, Any], position: int) -> None:
        index = fragment.get("index")
        call_id = fragment.get("id")
        if not isinstance(index, int):  # no index: the call with this id, else by position
            index = next((k for k, c in self._calls.items() if call_id and c.id == call_id),
                         ("position", position))
        call = self._calls.get(index)
        if call is None:
            self._budget.take_value(fragment)
            call = self._calls[index] = _Call()
        function = optional(fragment.get("function"), dict,
                            f"chunk choices[0].delta.tool_calls[{position}].function",
                            "an object")
        self._merge(call, call_id, function or {}, self._budget)

    @staticmethod
    def _merge(call: _Call, call_id: Any, function: Dict[str, Any], budget: ReplyBudget
               ) -> None:
        if call_id and not call.id:
            call.id = call_id  # later fragments may repeat it
        name = function.get("name")
        if name and not call.name:
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            budget.take(arguments)
            call.parts.append(arguments)
        elif isinstance(arguments, dict):
            call.parts.append(json.dumps(arguments))
            budget.take(call.parts[-1])

    def reply(self) -> Dict[str, Any]:
        """The assistant dict; ``APIConnectionError`` if the stream was cut."""
        if not self.done and self._finish is None:
            raise APIConnectionError("the stream ended before [DONE] and a finish_reason")
        calls = [call_block(c.id, c.name, "".join(c.parts)) for c in self._calls.values()]
        refusal = "".join(self._refusal)
        stop = stop_reason_from_finish(self._finish, bool(calls))
        if stop == "end_turn" and refusal and not "".join(self._texts):
            stop = "refusal"
        content = assemble(self._texts, self._reasoning, calls, refusal)
        if not content and not self._finish:
            raise no_content(self._head or None)
        return finished(self._head, content, stop, self._usage)


def parse_chat_stream(
    chunks: Iterable[bytes], on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
    limit: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Dict[str, Any]:
    """Read a Chat Completions SSE byte stream up to ``[DONE]``; return the assistant dict.

    Each chunk dict goes to ``on_event`` exactly as received, before it is applied.
    """
    accumulator = ChatStreamAccumulator(budget_of(limit))
    try:
        feed = accumulator.feed
        scan = json_scanner()
        for sse in sse_events(chunks, limit):
            data = sse.data
            if data[:1] in (b"[", b" ") and data.strip() == b"[DONE]":
                accumulator.done = True
                break
            chunk = load_data(sse, scan)
            if chunk is None:
                continue
            if on_event is not None:
                on_event(chunk)
            if sse.event == "error" and not chunk.get("error"):
                raise error_from_chat(chunk)
            feed(chunk)
        return accumulator.reply()
    except BaseException:
        accumulator.release()  # the traceback keeps this frame: not what it gathered
        raise
