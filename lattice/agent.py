"""``Agent``: one conversation. Its options and tools; the conversation a query works on
(history, store, guard, session lock) is in ``conversation/conversation.py``, a query's
start and end in ``query/query.py``, the loop in ``query/loop.py``."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Type,
    Union,
)

from .cancellation import SignalLike, as_signal
from .compaction import rules as compaction
from .compaction.rules import AutoCompact
from .conversation.conversation import Conversation
from .durable.runs import check_run_id
from .messages import OutputT, ResultMessage
from .models.base import ModelClient, ModelRequest, as_model_client
from .observe.genai import server_of
from .observe.observer import Observer
from .options import (
    UNSET,
    Unset,
    check_extra,
    check_flags,
    check_history_store,
    check_hooks,
    check_instances,
    check_model,
    check_name,
    check_one_of,
    check_system,
    non_negative_number,
    optional_non_negative_int,
    optional_positive_int,
    positive_int,
)
from .query.output import (
    SUBMIT_OUTPUT_TOOL_NAME,
    ModelSchemaObject,
    OutputSchema,
    SchemaObject,
    resolve_output_schema,
)
from .query.query import Query
from .query.settings import QuerySettings
from .stores.base import HistoryStore
from .tools.definition import ToolCall, ToolLike, ToolResult, flatten_tools

__all__ = ["Agent", "create_agent", "Prompt"]

Prompt = Union[str, List[Dict[str, Any]]]
"""A prompt: a str, or a list of content blocks."""
System = Union[str, List[Dict[str, Any]]]
ClientLike = Union[ModelClient, Callable[[ModelRequest], Any]]
"""A ``ModelClient``, or a plain callable ``request -> dict`` (SPEC 2, 6)."""
OutputLike = Union[Type[OutputT], SchemaObject[OutputT], ModelSchemaObject[OutputT],
                   Dict[str, Any], OutputSchema]
"""What ``output_schema``/``output_format`` take (SPEC 7): a dataclass, TypedDict or
pydantic-style class, an object with ``parse()``, a JSON Schema dict, an ``OutputSchema``."""


class Agent(Generic[OutputT]):
    """One conversation with a model that can call tools.

    Keyword-only options (the README and ``docs/`` describe each): ``model``, ``api_key``,
    ``base_url``, ``model_client``, ``system``, ``tools``, ``max_turns`` (50),
    ``max_tokens`` (8192), ``request_timeout_ms``, ``auto_compact``, ``history_store``,
    ``output_schema``, ``output_format``, ``max_output_retries``, ``on_model_request``,
    ``include_partial_messages``, ``parallel_tool_calls``, ``extra`` (more request body
    fields, e.g. temperature), ``before_tool_call``, ``after_tool_call``,
    ``requires_approval``, ``session_lock_wait_s``, ``prompt_caching``,
    ``max_budget_tokens``, ``tracing``, ``trace_content``, ``observers``, ``name`` (what
    the agent is called: ``gen_ai.agent.name`` in traces; None by default).
    """

    def __init__(self, *, model: Optional[str] = None, api_key: Optional[str] = None,
                 base_url: Optional[str] = None, model_client: Optional[ClientLike] = None,
                 system: Optional[System] = None, tools: Optional[Iterable[ToolLike]] = None,
                 max_turns: int = 50, max_tokens: int = 8192,
                 request_timeout_ms: Optional[int] = None,
                 auto_compact: Union[bool, AutoCompact, Mapping[str, Any]] = False,
                 history_store: Optional[HistoryStore] = None,
                 output_schema: Optional[OutputLike[OutputT]] = None,
                 output_format: Optional[OutputLike[OutputT]] = None,
                 max_output_retries: Optional[int] = None,
                 on_model_request: Optional[Callable[[ModelRequest], Any]] = None,
                 include_partial_messages: bool = False, parallel_tool_calls: bool = False,
                 extra: Optional[Dict[str, Any]] = None,
                 before_tool_call: Optional[Callable[[ToolCall], Any]] = None,
                 after_tool_call: Optional[Callable[[ToolCall, ToolResult], Any]] = None,
                 requires_approval: Optional[Callable[[ToolCall], bool]] = None,
                 session_lock_wait_s: float = 0.0, prompt_caching: bool = False,
                 max_budget_tokens: Optional[int] = None, tracing: bool = False,
                 trace_content: bool = False,
                 observers: Optional[Iterable[Observer]] = None,
                 name: Optional[str] = None) -> None:
        self.name = check_name(name)
        self._agent_id = uuid.uuid4().hex  # gen_ai.agent.id: this Agent object
        check_model(model, model_client)
        check_one_of(output_schema=output_schema, output_format=output_format)
        check_hooks(on_model_request=on_model_request, before_tool_call=before_tool_call,
                    after_tool_call=after_tool_call, requires_approval=requires_approval)
        check_flags(include_partial_messages=include_partial_messages,
                    parallel_tool_calls=parallel_tool_calls, prompt_caching=prompt_caching,
                    tracing=tracing, trace_content=trace_content)
        watchers = _watchers(observers, tracing, trace_content, model_client)
        if model_client is None:
            from .models.anthropic import AnthropicClient

            model_client = AnthropicClient(api_key=api_key, base_url=base_url)
        self._server = server_of(model_client)  # (host, port) for traces
        output = resolve_output_schema(output_schema if output_format is None else output_format)
        self._settings = QuerySettings(
            model=model, client=as_model_client(model_client), system=check_system(system),
            max_turns=positive_int("max_turns", max_turns),
            max_tokens=positive_int("max_tokens", max_tokens),
            request_timeout_ms=optional_positive_int("request_timeout_ms", request_timeout_ms),
            auto_compact=compaction.resolve_auto_compact(auto_compact), output=output,
            output_native=output_format is not None,
            max_output_retries=optional_non_negative_int("max_output_retries",
                                                         max_output_retries),
            on_model_request=on_model_request,
            include_partial_messages=include_partial_messages,
            parallel_tool_calls=parallel_tool_calls, extra=check_extra(extra),
            before_tool_call=before_tool_call, after_tool_call=after_tool_call,
            requires_approval=requires_approval, prompt_caching=prompt_caching,
            max_budget_tokens=optional_positive_int("max_budget_tokens", max_budget_tokens),
            observers=watchers)
        if output is not None and output_format is None:
            self._settings.tool_definitions.append(output.tool_definition())
        self._conversation = Conversation(
            check_history_store(history_store),
            non_negative_number("session_lock_wait_s", session_lock_wait_s))
        self.add_tools(*flatten_tools(tools if tools is not None else ()))

    # -- tools ---------------------------------------------------------------------------
    def add_tools(self, *tools: ToolLike) -> None:
        """Register more tools (``Tool`` objects, functions, or tool providers such as MCP
        servers). A running query keeps the tools it started with."""
        made = flatten_tools(tools)
        names = [t.name for t in made]
        s = self._settings
        for name in names:
            if s.output is not None and not s.output_native and name == SUBMIT_OUTPUT_TOOL_NAME:
                raise ValueError(f"the tool name {SUBMIT_OUTPUT_TOOL_NAME!r} is reserved while "
                                 "output_schema is set")
            if name in s.tools or names.count(name) > 1:
                raise ValueError(f"duplicate tool name {name!r}")
        # Copy on write: a running query holds the old dict and list.
        self._settings = replace(s, tools={**s.tools, **{t.name: t for t in made}},
                                 tool_definitions=s.tool_definitions +
                                 [t.definition for t in made])

    # -- history ---------------------------------------------------------------------------
    def get_history(self) -> List[Dict[str, Any]]:
        """A deep copy of the conversation."""
        return self._conversation.snapshot()

    def replace_history(self, messages: List[Dict[str, Any]]) -> None:
        """Replace the conversation (and the store's copy); only while no query runs."""
        if not isinstance(messages, list):
            raise ValueError(f"replace_history takes a list of messages, got {messages!r}")
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise ValueError(f"replace_history: messages[{i}] must be a message dict, "
                                 f"got {message!r}")
        self._conversation.replace(messages)

    def pending_approvals(self) -> List[ToolCall]:
        """The calls waiting for a decision (empty when none); loads the store first."""
        return self._conversation.pending_calls(self._settings, self)

    # -- queries ---------------------------------------------------------------------------
    def _prepare(self, prompt: Any, approvals: Any, overrides: Mapping[str, Any],
                 *, partial_messages: bool) -> QuerySettings:
        """Check a query's prompt and overrides (ValueError naming them) before it starts."""
        if type(prompt) is not str:
            if prompt is None and approvals is None:
                raise ValueError("prompt is required (it may be None only with approvals=)")
            if prompt is not None:
                _check_prompt(prompt)
        if approvals is not None and not isinstance(approvals, dict):
            raise ValueError(f"approvals must be a dict of tool_use id -> decision, "
                             f"got {approvals!r}")
        settings = self._settings
        changes: Dict[str, Any] = {}
        if settings.include_partial_messages and not partial_messages:
            changes["include_partial_messages"] = False
        for name, value in overrides.items():
            required = name in ("max_turns", "max_tokens")  # the others take None: no limit
            if value is UNSET or (required and value is None):
                continue  # not given: the Agent's value applies
            changes[name] = (positive_int if required else optional_positive_int)(name, value)
        # Most queries change nothing: they share the Agent's settings (add_tools() replaces
        # them, never edits them) instead of copying 22 fields.
        return replace(settings, **changes) if changes else settings

    def query(self, prompt: Optional[Prompt] = None, *, signal: Optional[SignalLike] = None,
              request_timeout_ms: Union[int, None, Unset] = UNSET, max_turns: Optional[int] = None,
              max_tokens: Optional[int] = None, max_budget_tokens: Union[int, None, Unset] = UNSET,
              approvals: Optional[Dict[str, Any]] = None,
              run_id: Optional[str] = None) -> Query:
        """Run one query; yields ``AssistantMessage``, ``UserMessage`` (tool results),
        ``SystemMessage``, ``StreamEvent`` and, last, the ``ResultMessage``. The query
        starts now: the Agent is busy until the iterator ends or is closed. With a
        ``run_id`` it runs at most once to its end (SPEC 17: docs/durable-runs.md)."""
        return self._start(prompt, signal, approvals, run_id, {
            "request_timeout_ms": request_timeout_ms, "max_turns": max_turns,
            "max_tokens": max_tokens, "max_budget_tokens": max_budget_tokens}, lockstep=True)

    def prompt(self, prompt: Optional[Prompt] = None, *, signal: Optional[SignalLike] = None,
               request_timeout_ms: Union[int, None, Unset] = UNSET, max_turns: Optional[int] = None,
               max_tokens: Optional[int] = None, max_budget_tokens: Union[int, None, Unset] = UNSET,
               approvals: Optional[Dict[str, Any]] = None,
               run_id: Optional[str] = None) -> ResultMessage[OutputT]:
        """Run one query to its end and return the ``ResultMessage`` (``run_id``: see
        ``query``)."""
        return self._start(prompt, signal, approvals, run_id, {
            "request_timeout_ms": request_timeout_ms, "max_turns": max_turns,
            "max_tokens": max_tokens, "max_budget_tokens": max_budget_tokens},
            lockstep=False).result()

    def _start(self, prompt: Any, signal: Optional[SignalLike], approvals: Any, run_id: Any,
               overrides: Mapping[str, Any], *, lockstep: bool) -> Query:
        """The one body of ``query()`` and ``prompt()``: the options checked, the query
        started. ``lockstep``: the caller takes each message as it comes (``query()``),
        else only the result (``prompt()``: no partial messages, one handoff)."""
        checked_signal, checked_run_id = as_signal(signal), check_run_id(run_id)
        settings = self._prepare(prompt, approvals, overrides, partial_messages=lockstep)
        return Query(self._conversation, settings, prompt, approvals, checked_signal,
                     lockstep=lockstep, owner=self, run_id=checked_run_id)

    def interrupt(self) -> None:
        """End the running query as ``"interrupted"``; nothing when idle."""
        race = self._conversation.race
        if race is not None:
            race.interrupt()

    def __repr__(self) -> str:
        s = self._settings
        return (f"<Agent model={s.model!r} tools={list(s.tools)} "
                f"messages={len(self._conversation.history.messages)}>")


def _watchers(observers: Optional[Iterable[Observer]], tracing: bool, trace_content: bool,
              model_client: Any) -> List[Observer]:
    """The Agent's observers, and the tracing observer when tracing is on."""
    watchers = check_instances("observers", observers, Observer,
                               "lattice.observe.Observer objects")
    if tracing or os.environ.get("LATTICE_TRACING"):  # else tracing is never imported
        from .observe.tracing import tracing_observer

        made = tracing_observer(tracing, trace_content, client=model_client)
        if made is not None:
            watchers.append(made)
    return watchers


if TYPE_CHECKING:  # the type checker sees Agent's own parameters (and its output type)
    create_agent = Agent
else:
    def create_agent(**options: Any) -> Agent[Any]:
        """``Agent(**options)``."""
        return Agent(**options)


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and all(isinstance(b, dict) and "type" in b for b in prompt):
        return
    raise ValueError(f"prompt must be a str or a list of content blocks, got {prompt!r}")
