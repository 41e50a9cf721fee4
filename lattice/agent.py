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
from .cost import check_max_cost, check_prices
from .durable.runs import check_run_id
from .messages import OutputT, ResultMessage
from .models.base import ModelClient, ModelRequest, as_model_client
from .observe.genai import provider_name, server_of
from .observe.observer import Observer
from .options import (
    UNSET,
    Unset,
    check_bool,
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
from .tools.definition import Tool, ToolCall, ToolLike, ToolResult, flatten_tools

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
    ``max_budget_tokens``, ``prices``, ``max_cost_usd``, ``tracing``, ``trace_content``,
    ``observers``, ``name`` (what the agent is called: ``gen_ai.agent.name`` in traces, and
    ``as_tool()``'s default tool name; None by default).
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
                 max_budget_tokens: Optional[int] = None,
                 prices: Optional[Mapping[str, Mapping[str, float]]] = None,
                 max_cost_usd: Optional[float] = None, tracing: bool = False,
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
        self._provider = provider_name(model_client)  # a subagent's spans name its own
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
            prices=check_prices(prices), max_cost_usd=check_max_cost(max_cost_usd),
            observers=watchers, name=name)
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
                 *, partial_messages: bool, resuming: bool = False) -> QuerySettings:
        """Check a query's prompt and overrides (ValueError naming them) before it starts
        (``resuming``: a subagent's run left running is continued, with no new prompt)."""
        if type(prompt) is not str:
            if prompt is None and approvals is None and not resuming:
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
              run_id: Optional[str] = None, include_subagent_messages: bool = False) -> Query:
        """Run one query; yields ``AssistantMessage``, ``UserMessage`` (tool results),
        ``SystemMessage``, ``StreamEvent`` and, last, the ``ResultMessage``. The query
        starts now: the Agent is busy until the iterator ends or is closed. With a
        ``run_id`` it runs at most once to its end (SPEC 17: docs/durable-runs.md). With
        ``include_subagent_messages=True`` the messages of subagents it runs (``as_tool``)
        are yielded too, each with ``.parent_tool_use_id`` (SPEC 22)."""
        return self._start(prompt, signal, approvals, run_id, {
            "request_timeout_ms": request_timeout_ms, "max_turns": max_turns,
            "max_tokens": max_tokens, "max_budget_tokens": max_budget_tokens}, lockstep=True,
            subagent_messages=include_subagent_messages)

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
               overrides: Mapping[str, Any], *, lockstep: bool,
               subagent_messages: bool = False, parentage: Any = None,
               resuming: bool = False) -> Query:
        """The one body of ``query()``, ``prompt()`` and a subagent's query: the options
        checked, the query started. ``lockstep``: the caller takes each message as it comes
        (``query()``), else only the result (``prompt()``: no partial messages, one
        handoff). ``subagent_messages``: subagents' messages are yielded too; ``parentage``:
        what a subagent's query gets from the call that runs it (subagents.py)."""
        checked_signal, checked_run_id = as_signal(signal), check_run_id(run_id)
        check_bool("include_subagent_messages", subagent_messages)
        settings = self._prepare(prompt, approvals, overrides, partial_messages=lockstep,
                                 resuming=resuming)
        if settings.include_subagent_messages != subagent_messages:
            settings = replace(settings, include_subagent_messages=subagent_messages)
        return Query(self._conversation, settings, prompt, approvals, checked_signal,
                     lockstep=lockstep, owner=self, run_id=checked_run_id,
                     parentage=parentage)

    # -- subagents (SPEC 22) -----------------------------------------------------------------
    def as_tool(self, *, name: Optional[str] = None, description: Optional[str] = None,
                input_schema: Optional[Dict[str, Any]] = None, output: str = "result",
                isolated: bool = True, idempotent: Optional[bool] = None) -> Tool:
        """This agent as a tool another agent can call (a subagent).

        Args:
            name: the tool's name (default: this Agent's ``name`` option, then required).
            description: default the first line of this Agent's system prompt.
            input_schema: default ``{"prompt": str}``, whose ``prompt`` is the child's
                prompt; any other schema's input is sent as JSON text.
            output: ``"result"`` (the child's ``result``) or ``"structured"`` (its
                ``structured_result`` as JSON).
            isolated: True: every call runs on a fresh conversation with this Agent's
                options (parallel calls run at once); False: on this Agent's own
                conversation, one call at a time (a concurrent call gets an error result).
            idempotent: default True: after a crash, resuming the parent's durable run
                resumes the child's run (docs/subagents.md); False for a shared child
                (``isolated=False``) without a history store, whose run is not kept.

        The parent's signal, interrupt, token budget, tracer and approvals reach the
        child; its usage and (when asked) its messages come back (docs/subagents.md).
        """
        from .subagents import make_tool

        return make_tool(self, name=name, description=description, input_schema=input_schema,
                         output=output, isolated=isolated, idempotent=idempotent)

    def _fork(self, store: Any) -> Agent:
        """A new conversation with this Agent's options and tools (an isolated subagent
        call's), on ``store`` (None: memory only). ``_template`` names this Agent (cycles)."""
        made = Agent.__new__(Agent)
        made.name, made._agent_id, made._server = self.name, self._agent_id, self._server
        made._provider = self._provider
        made._settings = self._settings
        made._conversation = Conversation(store, self._conversation.lock_wait_s)
        made._template = self
        return made

    _template: Optional[Agent] = None  # an isolated subagent call's Agent: its template

    def _delegate(self, prompt: Any, approvals: Optional[Dict[str, Any]],
                  run_id: Optional[str], parentage: Any, *, resuming: bool = False) -> Query:
        """A subagent's query, run by the tool that delegates to it (subagents.py: the
        parent's signal reaches it through the query's run, not a signal of its own)."""
        return self._start(prompt, None, approvals, run_id, {}, lockstep=parentage.forward,
                           subagent_messages=parentage.forward, parentage=parentage,
                           resuming=resuming)

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
