"""What ``query()`` yields, and small readers of history dicts.

History entries are plain JSON-ready dicts (``{"role", "content", ...}``); the classes here
wrap them for the caller with shortcuts. Assistant entries may carry SDK keys (``model``,
``provider_response_id``, ``stop_reason``, ``usage``) that ``sendable()`` strips before a request.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Generic, List, Literal, Mapping, Optional, Union

from .tools.definition import ToolCall
from .usage import Usage

__all__ = [
    "AssistantMessage",
    "UserMessage",
    "SystemMessage",
    "StreamEvent",
    "ResultMessage",
    "ResultSubtype",
    "OutputT",
    "SDKMessage",
    "text_of",
    "tool_uses_of",
    "sendable",
    "PROVIDER_KEYS",
    "normalize_reply",
    "too_deep",
    "copy_json",
    "tool_result",
    "unanswered_tool_uses",
    "pending_tail",
]

Message = Dict[str, Any]

if TYPE_CHECKING:  # for the type checker, Any unless an output schema says (PEP 696)
    from typing_extensions import TypeVar

    OutputT = TypeVar("OutputT", default=Any)
else:
    from typing import TypeVar

    OutputT = TypeVar("OutputT")
"""The structured output's type: ``Agent(output_schema=Forecast)`` is an ``Agent[Forecast]``,
whose ``prompt()`` returns a ``ResultMessage[Forecast]``."""

ResultSubtype = Literal[
    "success", "interrupted", "awaiting_approval", "error_max_turns", "error_abort",
    "error_timeout", "error_missing_output", "error_max_output_retries", "error_max_budget",
]
"""``ResultMessage.subtype``: the endings that are results (the rows of
``lattice/query/endings.py``'s ``ENDINGS`` above "Not results"; a test holds the two to each
other)."""


def text_of(content: Any) -> str:
    """The text of a message's content: a str as is, text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b.get("text", "") for b in content
                   if isinstance(b, dict) and b.get("type") == "text")


def tool_uses_of(content: Any) -> List[Dict[str, Any]]:
    """The ``tool_use`` blocks of a message's content, in order."""
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]


PROVIDER_KEYS = ("openai_items", "gemini_parts")
"""Reply keys one codec needs back next turn (the Responses API's reasoning items,
Gemini's parts with their thought signatures, kept with the reply that made them):
``sendable`` keeps them, and every other codec leaves them out of what it sends."""


def sendable(message: Message) -> Message:
    """The provider-ready form of a history entry: ``role`` and ``content`` (and a
    ``PROVIDER_KEYS`` entry when the reply has one)."""
    ready = {"role": message["role"], "content": message["content"]}
    if "openai_items" in message:
        ready["openai_items"] = message["openai_items"]
    if "gemini_parts" in message:
        ready["gemini_parts"] = message["gemini_parts"]
    return ready


def _new_id() -> str:
    # uuid (and the platform module it loads) only when a client sent a call without an
    # id: rare, and 5% of ``import lattice`` otherwise (issue 28).
    import uuid

    return uuid.uuid4().hex[:20]


MAX_DEPTH = 100  # JSON nesting a reply may have; deeper input would break copy/json later


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests dicts/lists deeper than ``limit`` (the recursion is bounded
    by ``limit``, so hostile input cannot exhaust the stack)."""
    kind = type(value)
    if kind is dict:
        items: Any = value.values()
    elif kind is list:
        items = value
    else:
        return False
    if limit <= 0:
        return True
    for item in items:
        kind = type(item)
        if (kind is dict or kind is list) and too_deep(item, limit - 1):
            return True
    return False


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), faster than ``deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: copy_json(v) for k, v in value.items()}
    if kind is list:
        return [copy_json(v) for v in value]
    return value


def normalize_reply(raw: Any) -> Message:
    """The history entry for a client's reply, checked (a bad client fails loudly).

    A bare string is a text reply (one-line test clients); a tool_use without a usable id
    gets a generated one, so its result can answer it. Input nested deeper than
    ``MAX_DEPTH`` is refused before it enters the history.
    """
    if isinstance(raw, str):
        raw = {"content": raw, "stop_reason": "end_turn"}
    if not isinstance(raw, dict):
        raise TypeError(f"the model client returned {type(raw).__name__}, expected a dict "
                        "like {'role': 'assistant', 'content': [...]}")
    content = raw.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise TypeError(f"the model client's reply has content {content!r:.200}, expected a "
                        "list of content blocks (dicts)")
    for n, block in enumerate(content):
        if type(block) is not dict:
            raise TypeError(f"the model client's reply has content block {block!r:.200}, "
                            "expected a dict")
        kind = block.get("type")
        if kind == "text" and type(block.get("text")) is str:
            continue  # the common case, flat
        for value in block.values():  # the block's own level inline: a tool_use is flat
            nested = type(value)
            if (nested is dict or nested is list) and too_deep(value, MAX_DEPTH - 3):
                from .errors import APIConnectionError

                raise APIConnectionError(f"the model's reply is nested deeper than "
                                         f"{MAX_DEPTH} levels; refused")
        if kind == "tool_use" and (type(block.get("id")) is not str or not block["id"]):
            content[n] = {**block, "id": f"toolu_lattice_{_new_id()}"}
    entry: Message = {"role": "assistant", "content": content}
    for key in _REPLY_KEYS:
        value = raw.get(key)
        if value is not None:
            entry[key] = value
    return entry


_REPLY_KEYS = ("model", "provider_response_id", "stop_reason", "usage", "openai_items",
               "gemini_parts")


def tool_result(tool_use_id: str, content: Any, *, is_error: bool = False) -> Dict[str, Any]:
    """A ``tool_result`` block."""
    block: Dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id,
                             "content": content}
    if is_error:
        block["is_error"] = True
    return block


def unanswered_tool_uses(history: List[Message]) -> List[Dict[str, Any]]:
    """The ``tool_use`` blocks of the last message, when it is an assistant message.

    The loop writes a reply and its results as a pair, so only the tail can be unanswered.
    """
    if not history or history[-1].get("role") != "assistant":
        return []
    return tool_uses_of(history[-1].get("content"))


def pending_tail(history: List[Message]) -> Optional[Message]:
    """The last message if it is a reply whose calls await approval (SPEC 12)."""
    if history and history[-1].get("role") == "assistant" and \
            history[-1].get("pending_approval") and unanswered_tool_uses(history):
        return history[-1]
    return None


def _short(text: Optional[str], limit: int = 60) -> str:
    if text is None:
        return "None"
    text = text.replace("\n", " ")
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


class _HistoryEntry:
    """A yielded message holding a history dict. ``.message`` is a copy, made when first
    read, so editing it never changes the conversation (the history's own dicts are never
    changed after they are written, so copying late is as good as copying now)."""

    __slots__ = ("_source", "_copy", "parent_tool_use_id")

    def __init__(self, message: Message) -> None:
        self._source = message
        self._copy: Optional[Message] = None
        # The subagent call whose agent wrote it (SPEC 22); None for the query's own.
        self.parent_tool_use_id: Optional[str] = None

    @property
    def message(self) -> Message:
        if self._copy is None:
            self._copy = copy_json(self._source)
        return self._copy

    @property
    def content(self) -> Any:
        return self.message.get("content")


class AssistantMessage(_HistoryEntry):
    """A model reply, as it entered the history (``.message``)."""

    type = "assistant"
    __slots__ = ()

    @property
    def text(self) -> str:
        return text_of(self.content)

    @property
    def tool_uses(self) -> List[Dict[str, Any]]:
        return tool_uses_of(self.content)

    @property
    def stop_reason(self) -> Optional[str]:
        return self.message.get("stop_reason")

    @property
    def usage(self) -> Usage:
        return Usage.from_dict(self.message.get("usage"))

    @property
    def model(self) -> Optional[str]:
        return self.message.get("model")

    @property
    def provider_response_id(self) -> Optional[str]:
        return self.message.get("provider_response_id")

    def __repr__(self) -> str:
        tools = ", ".join(b.get("name", "?") for b in self.tool_uses)
        extra = f" tools=[{tools}]" if tools else ""
        return f"<AssistantMessage text={_short(self.text)}{extra} stop={self.stop_reason}>"


class UserMessage(_HistoryEntry):
    """A user message the loop wrote (tool results); the prompt itself is not yielded."""

    type = "user"
    __slots__ = ()

    def __repr__(self) -> str:
        content = self.content
        if isinstance(content, list):
            n_err = sum(1 for b in content if isinstance(b, dict) and b.get("is_error"))
            return f"<UserMessage {len(content)} blocks, {n_err} errors>"
        return f"<UserMessage text={_short(text_of(content))}>"


class SystemMessage:
    """Something the SDK did on its own: ``subtype == "compaction"``."""

    type = "system"
    __slots__ = ("subtype", "compacted_messages", "usage", "parent_tool_use_id")

    def __init__(self, subtype: str, compacted_messages: int = 0,
                 usage: Optional[Usage] = None) -> None:
        self.subtype = subtype
        self.compacted_messages = compacted_messages
        self.usage = usage if usage is not None else Usage()
        self.parent_tool_use_id: Optional[str] = None

    def __repr__(self) -> str:
        return (f"<SystemMessage {self.subtype} compacted_messages={self.compacted_messages} "
                f"usage={self.usage.to_dict()}>")


class StreamEvent:
    """A raw streaming event (only with ``include_partial_messages=True``)."""

    type = "stream_event"
    __slots__ = ("event", "parent_tool_use_id")

    def __init__(self, event: Dict[str, Any]) -> None:
        self.event = event
        self.parent_tool_use_id: Optional[str] = None

    def __repr__(self) -> str:
        return f"<StreamEvent {self.event.get('type')}>"


class ResultMessage(Generic[OutputT]):
    """How a query ended; always the last message. ``structured_result`` is the output
    schema's value (an ``OutputT``) on a success of a query with an output schema, else
    None."""

    type = "result"
    __slots__ = ("subtype", "is_error", "result", "structured_result", "usage", "stop_reason",
                 "num_turns", "duration_ms", "error", "pending_approvals", "run_id", "replayed",
                 "parent_tool_use_id", "_prices", "_model", "_recorded_cost")

    def __init__(self, subtype: ResultSubtype, *, is_error: bool = False,
                 result: Optional[str] = None,
                 structured_result: Any = None, usage: Optional[Usage] = None,
                 stop_reason: Optional[str] = None, num_turns: int = 0,
                 duration_ms: int = 0, error: Optional[BaseException] = None,
                 pending_approvals: Optional[List[ToolCall]] = None,
                 run_id: Optional[str] = None, replayed: bool = False) -> None:
        self.subtype: ResultSubtype = subtype
        self.is_error = is_error
        self.result = result
        self.structured_result: OutputT = structured_result
        self.usage = usage if usage is not None else Usage()
        self.stop_reason = stop_reason
        self.num_turns = num_turns
        self.duration_ms = duration_ms
        self.error = error
        # for "awaiting_approval": the calls waiting for a decision
        self.pending_approvals: List[ToolCall] = list(pending_approvals or ())
        self.run_id = run_id  # the durable run's id (SPEC 17)
        self.replayed = replayed  # True: the recorded result of a run that had ended
        self.parent_tool_use_id: Optional[str] = None  # (a subagent's is never yielded)
        self._prices: Optional[Mapping[str, Any]] = None  # the Agent's prices= (cost.py)
        self._model: Optional[str] = None  # the Agent's model: tokens no model claims
        self._recorded_cost: Optional[List[Optional[float]]] = None  # [cost] of a replay

    @property
    def total_cost_usd(self) -> Optional[float]:
        """What the query cost in US dollars, from ``usage.by_model`` and the price table
        (the bundled ``prices.json`` under the Agent's ``prices=``); None when a model
        that used tokens has no price (a DEBUG log names it). The table is read on first
        use."""
        if self._recorded_cost is not None:  # a durable run's replay: as it was recorded
            return self._recorded_cost[0]
        from .cost import cost_usd

        return cost_usd(self.usage, self._prices, self._model)

    def _priced_by(self, prices: Optional[Mapping[str, Any]], model: Optional[str]
                   ) -> ResultMessage[OutputT]:
        """Price this result with the query's ``prices`` and ``model`` (query.py)."""
        self._prices, self._model = prices, model
        return self

    def _as_recorded(self, data: Mapping[str, Any]) -> ResultMessage[OutputT]:
        """A replayed result's cost is the recorded one (``to_dict``'s, when it has one:
        the usage kept in a record is not split by model)."""
        cost = data.get("total_cost_usd")
        if "total_cost_usd" in data and (cost is None or isinstance(cost, (int, float))):
            self._recorded_cost = [None if cost is None else float(cost)]
        return self

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict (the error as its type and message; a structured result
        that is not JSON-ready as its ``repr``)."""
        structured = self.structured_result
        if structured is not None:
            try:
                json.dumps(structured)
            except (TypeError, ValueError):
                from .tools.definition import to_jsonable

                structured = to_jsonable(structured)
        return {
            "type": self.type, "subtype": self.subtype, "is_error": self.is_error,
            "result": self.result, "structured_result": structured,
            "usage": self.usage.to_dict(), "stop_reason": self.stop_reason,
            "num_turns": self.num_turns, "duration_ms": self.duration_ms,
            "error": None if self.error is None else
            f"{type(self.error).__name__}: {self.error}",
            "run_id": self.run_id, "replayed": self.replayed,
            "total_cost_usd": self.total_cost_usd,
        }

    def __repr__(self) -> str:
        bits: List[str] = [self.subtype]
        if self.structured_result is not None:
            bits.append(f"structured_result={self.structured_result!r:.60}")
        else:
            bits.append(f"result={_short(self.result)}")
        if self.error is not None:
            bits.append(f"error={type(self.error).__name__}")
        bits.append(f"turns={self.num_turns} {self.duration_ms}ms")
        return "<ResultMessage " + " ".join(bits) + ">"

    def _repr_markdown_(self) -> str:
        head = f"**{self.subtype}**" + (" (error)" if self.is_error else "")
        u = self.usage
        turns = "1 turn" if self.num_turns == 1 else f"{self.num_turns} turns"
        meta = (f"{turns} · {self.duration_ms} ms · "
                f"{u.input_tokens} in / {u.output_tokens} out tokens"
                + (f" · stop: `{self.stop_reason}`" if self.stop_reason else ""))
        body = ""
        if self.structured_result is not None:
            body = "```\n" + repr(self.structured_result) + "\n```"
        elif self.result:
            body = self.result
        if self.error is not None:
            body += f"\n\n`{type(self.error).__name__}: {self.error}`"
        return f"{head}  \n{meta}\n\n{body}".rstrip() + "\n"


SDKMessage = Union[AssistantMessage, UserMessage, SystemMessage, StreamEvent,
                   "ResultMessage[Any]"]
"""What ``Agent.query()`` yields."""
