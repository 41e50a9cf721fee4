"""Token providers are part of the client (SPEC 21b), on every client that takes one.

What a provider raises becomes ``AuthenticationError`` naming its type (the original as
``__cause__`` only when it holds no secret-shaped text); anything but a non-empty str is
``AuthenticationError``; a provider that hangs is given up at the request's deadline (or
its abort) and its thread ends when it returns.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable

import pytest

from lattice import (
    AbortController,
    Agent,
    AnthropicVertexClient,
    AzureOpenAIChatClient,
    AzureOpenAIResponsesClient,
    OpenAIResponsesClient,
    VertexGeminiClient,
)
from lattice.errors import AbortError, AuthenticationError, RequestTimeoutError
from lattice.models.base import ModelRequest

URL = "http://127.0.0.1:9"  # never reached: the provider fails first
SECRET = "sk-provider-SECRET-abcdefghijklmnop"


def make(name: str, provider: Callable[[], Any], **options: Any) -> Any:
    options.setdefault("max_retries", 0)
    if name == "vertex":
        return AnthropicVertexClient(project_id="p", region="us-east5", base_url=URL,
                                     token_provider=provider, **options)
    if name == "azure-chat":
        return AzureOpenAIChatClient(endpoint=URL, deployment="d", api_version="2024-10-21",
                                     token_provider=provider, **options)
    if name == "vertex-gemini":
        return VertexGeminiClient(project_id="p", region="us-east5", base_url=URL,
                                  token_provider=provider, **options)
    if name == "azure-responses":
        return AzureOpenAIResponsesClient(endpoint=URL, token_provider=provider, **options)
    return OpenAIResponsesClient(base_url=URL, token_provider=provider, **options)


CLIENTS = ["vertex", "vertex-gemini", "azure-chat", "azure-responses", "openai-responses"]


def request(**fields: Any) -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


@pytest.mark.parametrize("name", CLIENTS)
def test_a_provider_that_raises_is_an_authentication_error(name: str) -> None:
    def provider() -> str:
        raise RuntimeError("the identity service is down")

    with pytest.raises(AuthenticationError) as info:
        make(name, provider).create(request())
    assert str(info.value) == ("the token provider failed: RuntimeError: the identity "
                               "service is down")
    assert isinstance(info.value.__cause__, RuntimeError)  # nothing secret in it


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize("message", [f"refresh failed for {SECRET}",
                                     f"token={SECRET[:12]} expired",
                                     "header Bearer abc.def.ghi refused"])
def test_a_provider_error_holding_a_secret_is_redacted_and_not_chained(
        name: str, message: str) -> None:
    def provider() -> str:
        raise ValueError(message)

    with pytest.raises(AuthenticationError) as info:
        make(name, provider).create(request())
    error = info.value
    assert str(error).startswith("the token provider failed: ValueError: ")
    assert "***" in str(error)
    assert error.__cause__ is None and error.__context__ is None
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    for secret in (SECRET, SECRET[:12], "abc.def.ghi"):
        assert secret not in text


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize("value", [None, "", "  ", 5, b"token", ["t"], "to\nken"])
def test_a_provider_returning_anything_but_a_token_is_an_authentication_error(
        name: str, value: Any) -> None:
    with pytest.raises(AuthenticationError, match="token"):
        make(name, lambda: value).create(request())


def _providers_running() -> int:
    return sum(t.name == "lattice-token-provider" for t in threading.enumerate())


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize("how", ["deadline", "abort"])
def test_a_hung_provider_is_bounded_and_leaves_no_thread_when_it_returns(
        name: str, how: str) -> None:
    release = threading.Event()

    def provider() -> str:
        release.wait(30)
        return "late-token-0123456789"

    controller = AbortController()
    if how == "deadline":
        client, fields = make(name, provider, timeout_ms=300), {}
        expected: Any = RequestTimeoutError
    else:
        client, fields = make(name, provider), {"signal": controller.signal}
        threading.Timer(0.3, controller.abort).start()
        expected = AbortError
    began = time.monotonic()
    with pytest.raises(expected):
        client.create(request(**fields))
    assert 0.25 < time.monotonic() - began < 5
    assert _providers_running() >= 1  # still inside the provider, as it must be
    release.set()
    deadline = time.monotonic() + 5
    while _providers_running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _providers_running() == 0


def test_prompt_raises_the_authentication_error() -> None:
    def provider() -> str:
        raise OSError("no credentials file")

    agent = Agent(model_client=make("openai-responses", provider), model="m")
    with pytest.raises(AuthenticationError, match="the token provider failed: OSError"):
        agent.prompt("hi")
