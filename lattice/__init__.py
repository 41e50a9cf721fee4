"""lattice: a synchronous agent loop for the Anthropic Messages API (direct, on Bedrock or
Vertex AI) and OpenAI's Chat Completions and Responses APIs (direct or on Azure), and Gemini
(the Gemini API or Vertex AI).

``Agent.prompt()`` blocks, ``Agent.query()`` is a generator; no asyncio anywhere. The only
runtime dependency, ``requests``, is imported by the built-in HTTP client when it is used.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .agent import Agent, create_agent
from .cancellation import AbortController, AbortSignal
from .compaction.rules import DEFAULT_COMPACTION_PROMPT, AutoCompact
from .durable.follow import follow
from .errors import (
    AbortError,
    APIConnectionError,
    APIError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    BudgetExceededError,
    ConcurrentQueryError,
    HistoryStoreError,
    InternalServerError,
    LatticeError,
    LockLostError,
    MaxTurnsExceededError,
    MissingOutputError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    PromptTooLongError,
    RateLimitError,
    ReplyRejectedError,
    RequestTimeoutError,
    SchemaError,
)
from .messages import (
    AssistantMessage,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    UserMessage,
)
from .models.base import ModelClient, ModelRequest
from .models.retry import RetryPolicy
from .query.output import SUBMIT_OUTPUT_TOOL_NAME, OutputSchema
from .query.query import Query
from .stores import HistoryStore, MemoryHistoryStore, define_history_store
from .tools.definition import Tool, ToolCall, ToolContext, ToolResult, tool
from .usage import Usage

if TYPE_CHECKING:  # the real classes for type checkers; at run time loaded on first use
    from .models.anthropic import AnthropicClient
    from .models.azure import AzureOpenAIChatClient, AzureOpenAIResponsesClient
    from .models.bedrock import AnthropicBedrockClient
    from .models.fallback import FallbackModelClient
    from .models.gemini import GeminiClient, VertexGeminiClient
    from .models.openai import OpenAIChatClient
    from .models.responses import OpenAIResponsesClient
    from .models.vertex import AnthropicVertexClient
    from .stores import (
        JsonlHistoryStore,
        PostgresHistoryStore,
        SqliteHistoryStore,
        create_jsonl_history_store,
    )

__all__ = [
    "__version__",
    # the agent
    "Agent",
    "create_agent",
    "Query",
    "AssistantMessage",
    "UserMessage",
    "SystemMessage",
    "StreamEvent",
    "ResultMessage",
    "Usage",
    # tools and output
    "tool",
    "Tool",
    "ToolResult",
    "ToolContext",
    "ToolCall",
    "OutputSchema",
    "SUBMIT_OUTPUT_TOOL_NAME",
    # cancellation
    "AbortController",
    "AbortSignal",
    # models
    "ModelClient",
    "ModelRequest",
    "AnthropicClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "AzureOpenAIChatClient",
    "AzureOpenAIResponsesClient",
    "AnthropicBedrockClient",
    "AnthropicVertexClient",
    "FallbackModelClient",
    "GeminiClient",
    "VertexGeminiClient",
    "RetryPolicy",
    # history
    "follow",
    "HistoryStore",
    "define_history_store",
    "create_jsonl_history_store",
    "JsonlHistoryStore",
    "SqliteHistoryStore",
    "PostgresHistoryStore",
    "MemoryHistoryStore",
    "AutoCompact",
    "DEFAULT_COMPACTION_PROMPT",
    # errors
    "LatticeError",
    "ConcurrentQueryError",
    "LockLostError",
    "MissingOutputError",
    "MaxTurnsExceededError",
    "BudgetExceededError",
    "RequestTimeoutError",
    "AbortError",
    "HistoryStoreError",
    "SchemaError",
    "APIError",
    "APIConnectionError",
    "APIStatusError",
    "BadRequestError",
    "PromptTooLongError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "RateLimitError",
    "InternalServerError",
    "OverloadedError",
    "ReplyRejectedError",
]


# Loaded on first use (issue 28: ``import lattice`` pays for neither ``requests``, which
# the HTTP clients' modules import, nor the file and database stores): name -> module.
_LAZY = {
    "AnthropicClient": ".models.anthropic",
    "OpenAIChatClient": ".models.openai",
    "OpenAIResponsesClient": ".models.responses",
    "AzureOpenAIChatClient": ".models.azure",
    "AzureOpenAIResponsesClient": ".models.azure",
    "AnthropicBedrockClient": ".models.bedrock",
    "AnthropicVertexClient": ".models.vertex",
    "FallbackModelClient": ".models.fallback",
    "GeminiClient": ".models.gemini",
    "VertexGeminiClient": ".models.gemini",
    "JsonlHistoryStore": ".stores.jsonl",
    "create_jsonl_history_store": ".stores.jsonl",
    "SqliteHistoryStore": ".stores.sqlite",
    "PostgresHistoryStore": ".stores.postgres",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lattice' has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
