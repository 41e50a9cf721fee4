"""An error event inside a 200 stream that echoes the key: the raised error's message and
its ``.body`` both hold ``***``, never the key (SPEC 16a, 24: the key is never in errors)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lattice import AnthropicClient, GeminiClient
from lattice.errors import APIStatusError
from lattice.models.base import ModelRequest

KEY = "AIza-stream-error-key-0123456789abcdef"


def _sse(data: Any, event: str = "") -> bytes:
    head = f"event: {event}\r\n" if event else ""
    return (head + "data: " + json.dumps(data) + "\r\n\r\n").encode()


def _client(kind: str, url: str) -> Any:
    if kind == "gemini":
        return GeminiClient(api_key=KEY, base_url=url, max_retries=0)
    return AnthropicClient(api_key=KEY, base_url=url, max_retries=0)


@pytest.mark.parametrize("kind", ["gemini", "anthropic"])
def test_an_error_event_echoing_the_key_is_redacted_in_the_body_too(raw: Any, kind: str
                                                                     ) -> None:
    echoed = f"bad request from key={KEY}"
    if kind == "gemini":
        body = _sse({"error": {"code": 400, "message": echoed, "status": "INVALID_ARGUMENT",
                               "details": [{"@type": "x.ErrorInfo", "metadata": {"k": KEY}}]}})
    else:
        body = _sse({"type": "error", "error": {"type": "invalid_request_error",
                                                "message": echoed}}, "error")
    server = raw((200, {"content-type": "text/event-stream"}, body))
    with pytest.raises(APIStatusError) as caught:
        _client(kind, server.url).create(ModelRequest(
            model="gemini-2.5-flash", messages=[{"role": "user", "content": "hi"}]))
    error = caught.value
    assert KEY not in str(error)
    assert "***" in json.dumps(error.body)
    assert KEY not in json.dumps(error.body)
