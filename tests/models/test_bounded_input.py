"""Bounded input from any server (SPEC 16a): ``max_response_bytes`` on both clients.

A real local server (``endless_server.py``) sends one SSE line, one SSE event or one JSON
body that never ends (plain or gzip, success or error status). The call fails with
``APIConnectionError`` naming the limit, the connection is closed (the server sees it),
and memory stays bounded: measured in a child process (its peak RSS), with the default
limit of 32 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from endless_server import EndlessServer

from lattice import AnthropicClient, OpenAIChatClient
from lattice.errors import APIConnectionError
from lattice.models.base import ModelRequest

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-bounded-0123456789"
CLIENTS = {"anthropic": AnthropicClient, "openai": OpenAIChatClient}
MiB = 1 << 20


def request() -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def _client(provider: str, server: EndlessServer, **options: Any) -> Any:
    base = server.url + ("/v1" if provider == "openai" else "")
    options.setdefault("max_retries", 0)
    return CLIENTS[provider](KEY, base_url=base, **options)


def _hung_up_soon(server: EndlessServer) -> bool:
    deadline = time.monotonic() + 5
    while not server.hung_up and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(server.hung_up)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("mode,stream,what", [
    ("sse-line", True, "an SSE line"), ("sse-event", True, "an SSE event"),
    ("json", False, "the response body"), ("gzip", False, "the response body"),
    ("error-json", False, "the response body"),
])
def test_an_endless_reply_fails_naming_the_limit_and_is_closed(
        provider: str, mode: str, stream: bool, what: str) -> None:
    with EndlessServer(mode) as server:
        client = _client(provider, server, stream=stream, max_response_bytes=MiB)
        began = time.monotonic()
        with pytest.raises(APIConnectionError) as info:
            client.create(request())
        assert time.monotonic() - began < 10
        assert f"{what} is larger than max_response_bytes ({MiB} bytes)" in str(info.value)
        assert _hung_up_soon(server), "the connection was left open"
        assert server.sent[0] < 64 * MiB if server.sent else True


_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
from endless_server import peak_rss_mb
import lattice
from lattice.models.base import ModelRequest
before = peak_rss_mb()
client = getattr(lattice, sys.argv[2])("sk-bounded-0123456789", base_url=sys.argv[3],
                                        stream=sys.argv[4] == "stream", max_retries=0)
try:
    client.create(ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}]))
    outcome = "no error"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
print(json.dumps({"before": before, "peak": peak_rss_mb(), "outcome": outcome}))
"""


@pytest.mark.parametrize("provider,mode", [("anthropic", "sse-line"), ("openai", "json")])
def test_memory_stays_bounded_with_the_default_limit(provider: str, mode: str) -> None:
    with EndlessServer(mode) as server:
        base = server.url + ("/v1" if provider == "openai" else "")
        name = CLIENTS[provider].__name__
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(ROOT), name, base,
             "stream" if mode.startswith("sse") else "json"],
            capture_output=True, text=True, timeout=120, check=True).stdout
    found = json.loads(out)
    assert found["outcome"].startswith("APIConnectionError") and "33554432" in found["outcome"]
    # 32 MiB of line or body at most, plus the joined copy of the last piece: the 0.2
    # client grew to gigabytes here.
    print(found)
    assert found["peak"] - found["before"] < 150, found


def test_the_limit_is_checked() -> None:
    for bad in (0, -1, 1.5, "1", True, None):
        with pytest.raises(ValueError, match="max_response_bytes"):
            AnthropicClient(KEY, max_response_bytes=bad)  # type: ignore[arg-type]
    assert OpenAIChatClient(KEY).max_response_bytes == 32 * MiB
    assert AnthropicClient(KEY, max_response_bytes=5).max_response_bytes == 5


def test_a_reply_within_the_limit_passes() -> None:
    from lattice.testing import MockMessagesServer

    with MockMessagesServer() as server:
        server.add("x" * 5000)
        client = AnthropicClient(KEY, base_url=server.base_url, max_response_bytes=64 * 1024)
        assert client.create(request())["content"][0]["text"] == "x" * 5000


# -- a call that gives up closes its connection ----------------------------------------------


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("how", ["timeout", "abort", "close"])
def test_a_call_that_gives_up_closes_its_connection(provider: str, how: str) -> None:
    import threading

    from lattice import AbortController, RequestTimeoutError
    from lattice.errors import AbortError

    with EndlessServer("keep-alive") as server:  # ": keep-alive" forever: no read timeout
        client = _client(provider, server, timeout_ms=1000 if how == "timeout" else 10_000)
        client._get_session()  # made (requests imported) before the clock starts
        controller = AbortController()
        call = ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                            signal=controller.signal)
        if how == "abort":
            threading.Timer(1.0, controller.abort).start()
        elif how == "close":
            threading.Timer(1.0, client.close).start()
        began = time.monotonic()
        with pytest.raises((RequestTimeoutError, AbortError, APIConnectionError)) as info:
            client.create(call)
        gave_up = time.monotonic()
        assert 0.9 < gave_up - began < 4
        expected = {"timeout": RequestTimeoutError, "abort": AbortError,
                    "close": APIConnectionError}[how]
        assert isinstance(info.value, expected), info.value
        if how == "timeout":
            assert info.value.kind == "request"  # type: ignore[attr-defined]
        assert _hung_up_soon(server) and server.hung_up[0] - gave_up < 1.0
        assert len(server.requests) == 1  # never retried
