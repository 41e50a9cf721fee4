"""How every example picks its model.

``LATTICE_PROVIDER=openai`` speaks OpenAI-compatible Chat Completions (``OpenAIChatClient``;
the real API when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set),
``LATTICE_PROVIDER=openai-responses`` OpenAI's Responses API (``OpenAIResponsesClient``,
likewise), otherwise the Anthropic
Messages API (the real API when ``ANTHROPIC_API_KEY`` is set). The model comes from
``LATTICE_MODEL``. Without a key, the bundled mock server on 127.0.0.1 answers, in the
chosen API's wire format, from the example's script.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List


@contextmanager
def model_options(mock_replies: List[Any], repeat: bool = False) -> Iterator[Dict[str, Any]]:
    """Agent options for the backend in use; ``mock_replies`` script the offline server
    (``repeat=True``: over and over, e.g. one function that answers every request)."""
    provider = os.environ.get("LATTICE_PROVIDER")
    responses = provider == "openai-responses"
    openai = provider == "openai" or responses
    if openai and (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        from lattice import OpenAIChatClient, OpenAIResponsesClient

        print(f"(talking to a real {'Responses' if responses else 'Chat Completions'} API)")
        yield {"model": os.environ.get("LATTICE_MODEL", "gpt-4o-mini"),
               "model_client": OpenAIResponsesClient() if responses else OpenAIChatClient()}
        return
    if not openai and os.environ.get("ANTHROPIC_API_KEY"):
        print("(talking to the real API)")
        yield {"model": os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")}
        return
    from lattice.testing import MockMessagesServer

    with MockMessagesServer(mock_replies, repeat=repeat) as server:
        if responses:
            from lattice import OpenAIResponsesClient

            print(f"(offline: mock Responses API at {server.base_url}/v1)")
            yield {"model": "mock-model", "model_client": OpenAIResponsesClient(
                api_key="offline-mock-key", base_url=server.base_url)}
            return
        if openai:
            from lattice import OpenAIChatClient

            print(f"(offline: mock Chat Completions API at {server.base_url}/v1)")
            client = OpenAIChatClient("offline-mock-key", base_url=server.base_url + "/v1")
            yield {"model": "mock-model", "model_client": client}
            return
        print(f"(offline: mock Messages API at {server.base_url})")
        yield {"model": "mock-model", "base_url": server.base_url, "api_key": "offline-mock-key"}
