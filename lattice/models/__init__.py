"""Model clients: the protocol the loop talks to, the retry policy, and (in their own
modules, loaded on first use) the built-in Anthropic and Chat Completions clients."""

from .base import ModelClient, ModelRequest, as_model_client
from .retry import RetryPolicy

__all__ = ["ModelClient", "ModelRequest", "RetryPolicy", "as_model_client"]
