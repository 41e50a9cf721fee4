"""How every example picks its model: the real API when ``ANTHROPIC_API_KEY`` is set
(model from ``LATTICE_MODEL``), otherwise the bundled mock server on 127.0.0.1."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List


@contextmanager
def model_options(mock_replies: List[Any]) -> Iterator[Dict[str, Any]]:
    """Agent options for the backend in use; ``mock_replies`` script the offline server."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        print("(talking to the real API)")
        yield {"model": os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")}
        return
    from lattice.testing import MockMessagesServer

    with MockMessagesServer(mock_replies) as server:
        print(f"(offline: mock Messages API at {server.base_url})")
        yield {"model": "mock-model", "base_url": server.base_url, "api_key": "offline-mock-key"}
