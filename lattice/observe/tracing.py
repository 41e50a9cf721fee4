"""OpenTelemetry tracing as an observer (SPEC 15); the one module that imports opentelemetry.

Each query is a span ``invoke_agent``; each model request a child span ``chat {model}``;
each tool call a child span ``execute_tool {name}``, all with the OpenTelemetry GenAI
attributes (``gen_ai.provider.name`` on the query and chat spans). Message content
(prompt, replies, tool input and output) is recorded only with ``trace_content=True``: it
may hold personal data or secrets. What the attributes hold, in the conventions' schemas,
is ``genai.py``'s business.

``opentelemetry`` is imported when an ``OtelObserver`` is made, never at import time, so
with tracing off nothing is imported and the loop pays one None check.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from typing import TYPE_CHECKING, Any, Dict, Optional

from .._version import __version__
from ..options import check_bool
from ..usage import Usage
from . import genai
from .observer import Observer, QueryDetails, ToolCallLike, query_details

if TYPE_CHECKING:
    from ..messages import ResultMessage
    from ..models.base import ModelRequest

__all__ = ["OtelObserver", "tracing_observer", "tracing_enabled", "ENV_VAR"]

log = logging.getLogger("lattice")

ENV_VAR = "LATTICE_TRACING"
_TRUE = frozenset(["1", "true", "yes", "on"])


def tracing_enabled(enabled: bool = False) -> bool:
    """``enabled`` (the Agent's ``tracing`` option), or ``LATTICE_TRACING=1`` in the
    environment."""
    return bool(enabled) or os.environ.get(ENV_VAR, "").strip().lower() in _TRUE


def tracing_observer(enabled: bool = False, trace_content: bool = False, *,
                     tracer_provider: Any = None, client: Any = None) -> Optional[Observer]:
    """An ``OtelObserver`` when tracing is enabled and ``opentelemetry-api`` is installed,
    else None (tracing without the package is not an error: nothing is traced).
    ``client``: the Agent's model client (None: the default ``AnthropicClient``), whose
    provider the spans name."""
    if not tracing_enabled(enabled):
        return None
    try:
        return OtelObserver(trace_content=trace_content, tracer_provider=tracer_provider,
                            provider_name=genai.provider_name(client))
    except ImportError:
        log.info("tracing is on but opentelemetry-api is not installed, so nothing is traced "
                 "(pip install 'agent-lattice[otel]')")
        return None


class _Open:
    """A started span and what its end needs (the token handed back to the loop); a
    query's also what its children's spans carry (``shared``: the conversation id and
    the server); ``provider``: the ``gen_ai.provider.name`` its spans say (a subagent's
    query and its chat spans name the child's provider, not this observer's)."""

    __slots__ = ("span", "shared", "provider")

    def __init__(self, span: Any, shared: Optional[Dict[str, Any]] = None,
                 provider: str = "") -> None:
        self.span = span
        self.shared = shared or {}
        self.provider = provider


class OtelObserver(Observer):
    """Spans and GenAI attributes for each query, model request and tool call.

    Args:
        trace_content: also record the prompt, the replies and the tools' input and output
            (``gen_ai.input.messages``, ``gen_ai.output.messages``,
            ``gen_ai.system_instructions``, ``gen_ai.tool.call.arguments``,
            ``gen_ai.tool.call.result``), as JSON.
        tracer_provider: the OpenTelemetry ``TracerProvider`` to use; default the global
            one (``opentelemetry.trace.set_tracer_provider``).
        provider_name: ``gen_ai.provider.name`` (``anthropic``, ``openai``,
            ``aws.bedrock``, ``gcp.vertex_ai``, ``azure.ai.openai``, ...).

    Raises:
        ImportError: ``opentelemetry-api`` is not installed.
    """

    def __init__(self, *, trace_content: bool = False, tracer_provider: Any = None,
                 provider_name: str = "anthropic") -> None:
        check_bool("trace_content", trace_content)
        if not isinstance(provider_name, str) or not provider_name:
            raise ValueError(f"provider_name must be a non-empty str, got {provider_name!r}")
        self.provider_name = provider_name
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.trace_content = trace_content
        self._trace = trace
        self._kinds = SpanKind
        self._status, self._error = Status, StatusCode.ERROR
        self._tracer = trace.get_tracer("lattice", __version__, tracer_provider=tracer_provider)

    def __repr__(self) -> str:
        return (f"<OtelObserver provider={self.provider_name} "
                f"trace_content={self.trace_content}>")

    # -- spans ---------------------------------------------------------------------------
    def _start(self, name: str, parent: Any, kind: Any, attributes: Dict[str, Any]) -> _Open:
        # The loop calls from worker threads, where the caller's context is not current:
        # children name their parent explicitly (and carry what the query shares).
        context = None
        if isinstance(parent, _Open):
            context = self._trace.set_span_in_context(parent.span)
            attributes = {**parent.shared, **attributes}
        span = self._tracer.start_span(name, context=context, kind=kind,
                                       attributes=_clean(attributes))
        return _Open(span, provider=self._provider_of(parent))

    def _provider_of(self, token: Any) -> str:
        # A span's provider is its query's (a subagent may use another client).
        return token.provider if isinstance(token, _Open) and token.provider else \
            self.provider_name

    def _fail(self, span: Any, error_type: str, error: Optional[BaseException]) -> None:
        span.set_attribute("error.type", error_type)
        if error is not None:  # the stacktrace of the error alone: its causes may hold
            # what it was redacted of (SPEC 21b)
            trace = traceback.format_exception(type(error), error, error.__traceback__,
                                               chain=False)
            span.record_exception(error, attributes={"exception.stacktrace": "".join(trace)})
        span.set_status(self._status(self._error, str(error) if error is not None else error_type))

    def _content(self, span: Any, name: str, value: Any) -> None:
        if self.trace_content and value is not None:
            span.set_attribute(name, _json(value))

    # -- the query -------------------------------------------------------------------
    def query_start(self, model: Optional[str], prompt: Any) -> Any:
        return self.agent_start(model, prompt)

    def agent_start(self, model: Optional[str], prompt: Any, *, name: Optional[str] = None,
                    parent: Any = None) -> Any:
        # ``parent``: a subagent's query nests under the parent's ``execute_tool`` span.
        details = query_details() or QueryDetails()
        name = name or details.agent_name
        provider = details.provider_name or self.provider_name  # a child's own client's
        shared = _clean({"gen_ai.conversation.id": details.conversation_id,
                         "server.address": details.server_address,
                         "server.port": details.server_port,
                         "gen_ai.agent.name": name})  # the query's spans say whose they are
        opened = self._start(f"invoke_agent {name}" if name else "invoke_agent", parent,
                             self._kinds.INTERNAL, {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": provider,
            "gen_ai.request.model": model, "gen_ai.agent.id": details.agent_id, **shared})
        opened.shared, opened.provider = shared, provider
        if prompt is not None:  # None: a resumed query (approvals), no new prompt
            self._content(opened.span, "gen_ai.input.messages",
                          genai.input_messages([{"role": "user", "content": prompt}]))
        return opened

    def query_end(self, token: Any, result: Optional[ResultMessage],
                  error: Optional[BaseException]) -> None:
        if not isinstance(token, _Open):
            return
        span = token.span
        if result is not None:
            finish = genai.finish_reason(self._provider_of(token), result.stop_reason)
            span.set_attributes(_clean({
                "lattice.result.subtype": result.subtype,
                "gen_ai.response.finish_reasons": [finish] if finish else None,
                **_usage_attributes(result.usage)}))
            if result.result is not None:
                self._content(span, "gen_ai.output.messages", genai.output_messages(
                    result.result, genai.output_finish_reason(result.stop_reason,
                                                              result.is_error)))
        if error is not None:
            self._fail(span, _error_type(error), error)
        elif result is not None and result.is_error:
            self._fail(span, result.subtype, None)
        span.end()

    # -- model requests ----------------------------------------------------------------
    def model_start(self, query: Any, request: ModelRequest) -> Any:
        model = request.model
        opened = self._start(f"chat {model}" if model else "chat", query,
                             self._kinds.CLIENT, {
                                 "gen_ai.operation.name": "chat",
                                 "gen_ai.provider.name": self._provider_of(query),
                                 "gen_ai.request.model": model,
                                 "gen_ai.request.max_tokens": request.max_tokens})
        if self.trace_content:  # the conversion costs: only when recorded
            self._content(opened.span, "gen_ai.system_instructions",
                          genai.system_instructions(request.system))
            self._content(opened.span, "gen_ai.input.messages",
                          genai.input_messages(request.messages))
        return opened

    def model_end(self, token: Any, reply: Optional[Dict[str, Any]],
                  error: Optional[BaseException]) -> None:
        if not isinstance(token, _Open):
            return
        span = token.span
        if reply is not None:
            finish = genai.finish_reason(self._provider_of(token), reply.get("stop_reason"))
            span.set_attributes(_clean({
                "gen_ai.response.model": reply.get("model"),
                "gen_ai.response.id": reply.get("provider_response_id") or reply.get("id"),
                "gen_ai.response.finish_reasons": [finish] if finish else None,
                **_usage_attributes(Usage.from_dict(reply.get("usage")))}))
            if self.trace_content:
                self._content(span, "gen_ai.output.messages", genai.output_messages(
                    reply.get("content"), genai.output_finish_reason(reply.get("stop_reason"))))
        if error is not None:
            self._fail(span, _error_type(error), error)
        span.end()

    # -- tool calls ----------------------------------------------------------------------
    def tool_start(self, query: Any, call: ToolCallLike) -> Any:
        opened = self._start(f"execute_tool {call.name}", query, self._kinds.INTERNAL, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
            "gen_ai.tool.description": _description(call)})
        self._content(opened.span, "gen_ai.tool.call.arguments", call.input)
        return opened

    def tool_end(self, token: Any, result: Optional[Dict[str, Any]],
                 error: Optional[BaseException]) -> None:
        if not isinstance(token, _Open):
            return
        span = token.span
        if result is not None:
            self._content(span, "gen_ai.tool.call.result", result.get("content"))
        if error is not None:
            self._fail(span, _error_type(error), error)
        elif result is not None and result.get("is_error"):
            self._fail(span, "tool_error", None)
        span.end()


def _description(call: Any) -> Optional[str]:
    """The called tool's description (``ToolCall.tool``), when it has one."""
    text = getattr(getattr(call, "tool", None), "description", None)
    return text if isinstance(text, str) and text else None


def _error_type(error: BaseException) -> str:
    return type(error).__qualname__


def _usage_attributes(usage: Usage) -> Dict[str, Any]:
    # GenAI conventions: input_tokens includes cached tokens; the cache kinds come apart.
    return {"gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens or None,
            "gen_ai.usage.cache_creation.input_tokens":
                usage.cache_creation_input_tokens or None}


def _clean(attributes: Dict[str, Any]) -> Dict[str, Any]:
    """OpenTelemetry refuses None values: leave those attributes out."""
    return {k: v for k, v in attributes.items() if v is not None}


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=repr)
