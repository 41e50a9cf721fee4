"""Test doubles that ship with lattice: scripted clients and a real local Messages server.

``ScriptedModelClient`` and ``FunctionModelClient`` run an Agent with no HTTP at all;
``MockMessagesServer`` is a stdlib HTTP server on 127.0.0.1 speaking the Messages API
(JSON and SSE), so the built-in ``AnthropicClient`` runs end to end offline.
"""

from typing import TYPE_CHECKING, Any

from .clients import FunctionModelClient, ScriptedModelClient
from .invariants import assert_well_formed, history_problems

if TYPE_CHECKING:  # the real class for type checkers; at run time loaded on first use
    from .mock_server import MockMessagesServer

__all__ = [
    "ScriptedModelClient",
    "FunctionModelClient",
    "MockMessagesServer",
    "assert_well_formed",
    "history_problems",
]


def __getattr__(name: str) -> Any:
    # The server pulls in http.server; only pay for it when it is used.
    if name == "MockMessagesServer":
        from .mock_server import MockMessagesServer

        return MockMessagesServer
    raise AttributeError(f"module 'lattice.testing' has no attribute {name!r}")
