"""Model clients: the protocol the loop talks to, and the built-in Anthropic client."""

from .base import ModelClient, ModelRequest, as_model_client
from .retry import RetryPolicy

__all__ = ["ModelClient", "ModelRequest", "RetryPolicy", "as_model_client"]
