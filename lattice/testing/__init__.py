"""Test doubles that ship with lattice: scripted clients and a real local Messages server.

``ScriptedModelClient`` and ``FunctionModelClient`` run an Agent with no HTTP at all;
``MockMessagesServer`` is a stdlib HTTP server on 127.0.0.1 speaking the Messages API
(JSON and SSE), so the built-in ``AnthropicClient`` runs end to end offline.
``Recorder`` writes a client's real traffic to a JSON cassette, ``Replayer`` answers from
it offline (``recording.py``).
"""

from typing import TYPE_CHECKING, Any

from .clients import FunctionModelClient, ScriptedModelClient
from .invariants import assert_well_formed, history_problems

if TYPE_CHECKING:  # the real classes for type checkers; at run time loaded on first use
    from .mock_server import MockMessagesServer
    from .recording import Recorder, Replayer

__all__ = [
    "ScriptedModelClient",
    "FunctionModelClient",
    "MockMessagesServer",
    "Recorder",
    "Replayer",
    "assert_well_formed",
    "history_problems",
]


def __getattr__(name: str) -> Any:
    # The server pulls in http.server, the recorder tempfile: only paid for when used.
    if name == "MockMessagesServer":
        from .mock_server import MockMessagesServer

        return MockMessagesServer
    if name in ("Recorder", "Replayer"):
        from . import recording

        return getattr(recording, name)
    raise AttributeError(f"module 'lattice.testing' has no attribute {name!r}")
