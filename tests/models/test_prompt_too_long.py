"""``PromptTooLongError`` from every usual wording (SPEC 10a), through one recogniser."""

from __future__ import annotations

import json

import pytest

from lattice.errors import (
    BadRequestError,
    InternalServerError,
    PromptTooLongError,
    is_prompt_too_long,
)
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.models.wire import error_from_body, error_from_response
from lattice.testing.mock_server import MockMessagesServer

KEY = "sk-ant-mock-0123456789"

TOO_LONG = [
    "prompt is too long: 210000 tokens > 200000 maximum",  # Anthropic
    "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000",
    "Input is too long for requested model.",  # Bedrock
    "Too many input tokens",
    "too many tokens in the request",
    "This model's maximum context length is 8192 tokens. However, your messages resulted "
    "in 9000 tokens.",  # OpenAI
    "context_length_exceeded",
    "litellm.ContextWindowExceededError: litellm.BadRequestError: ...",  # LiteLLM
    "Context window exceeded for model x",
    "context_window_exceeded",
    "The request exceeds the context window",
    "prompt exceeds the model's maximum context length",
    "Request exceeds context limit",
]

NOT_TOO_LONG = [
    "messages: roles must alternate",
    "max_tokens: must be at most 8192",
    "too many requests",
    "the context is fine",
    "",
]


@pytest.mark.parametrize("message", TOO_LONG)
def test_every_usual_wording_is_recognised(message: str) -> None:
    assert is_prompt_too_long(message)
    assert is_prompt_too_long(message.upper())


@pytest.mark.parametrize("message", NOT_TOO_LONG)
def test_other_messages_are_not(message: str) -> None:
    assert not is_prompt_too_long(message)
    assert not is_prompt_too_long(message, None)


def test_a_code_alone_is_enough() -> None:
    assert is_prompt_too_long("Bad request", "context_length_exceeded")
    assert not is_prompt_too_long("Bad request", "invalid_value")


@pytest.mark.parametrize("message", TOO_LONG)
@pytest.mark.parametrize("stream", [True, False])
def test_over_http_each_wording_raises_prompt_too_long(message: str, stream: bool) -> None:
    with MockMessagesServer([MockMessagesServer.error(400, message)]) as server:
        client = AnthropicClient(KEY, server.base_url, stream=stream, max_retries=0)
        with pytest.raises(PromptTooLongError) as info:
            client.create(ModelRequest(model="m", messages=[{"role": "user", "content": "x"}]))
    assert info.value.status_code == 400 and info.value.message == message


def test_openai_shaped_body_with_only_a_code() -> None:
    body = {"error": {"message": "Bad request", "type": "invalid_request_error",
                      "code": "context_length_exceeded"}}
    error = error_from_response(400, {}, json.dumps(body).encode())
    assert type(error) is PromptTooLongError


def test_a_5xx_saying_too_long_is_not_a_bad_request() -> None:
    error = error_from_response(500, {}, b'{"error": {"message": "prompt is too long"}}')
    assert type(error) is InternalServerError


def test_a_stream_error_event_saying_too_long() -> None:
    event = {"type": "error", "error": {"type": "invalid_request_error",
                                        "message": "prompt is too long: 5 > 4"}}
    assert type(error_from_body(event, "x")) is PromptTooLongError
    event["error"]["message"] = "roles must alternate"
    assert type(error_from_body(event, "x")) is BadRequestError
