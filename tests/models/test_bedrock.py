"""AnthropicBedrockClient end to end against MockMessagesServer's Bedrock routes (SigV4
checked by the mock, event-stream frames streamed): tool loops, errors, retries, overflow
recovery, abort and timeout mid-stream."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
from helpers import assert_abort_mid_stream, assert_timeout_mid_stream, lookup, lookup_call

import lattice.models.bedrock as bedrock_module
from lattice import (
    Agent,
    AnthropicBedrockClient,
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    AutoCompact,
    BadRequestError,
    InternalServerError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    PromptTooLongError,
    RateLimitError,
    RequestTimeoutError,
    RetryPolicy,
)
from lattice.models.base import ModelRequest
from lattice.testing import MockMessagesServer, assert_well_formed
from lattice.testing._mock_bedrock import bedrock_frames

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
ARN = ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
       "us.anthropic.claude-sonnet-4-5-20250929-v1:0")
ID, SECRET = "mock-access-key-id", "mock-secret-access-key"


def client(server: MockMessagesServer, **options: Any) -> AnthropicBedrockClient:
    options.setdefault("access_key_id", ID)
    options.setdefault("secret_access_key", SECRET)
    options.setdefault("region", "us-east-1")
    return AnthropicBedrockClient(base_url=server.base_url, **options)


def request(model: str = MODEL) -> ModelRequest:
    return ModelRequest(model=model, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("stream", [True, False])
def test_a_tool_loop(stream: bool) -> None:
    with MockMessagesServer([lookup_call, "final answer"]) as server:
        agent = Agent(model=MODEL, model_client=client(server, stream=stream), tools=[lookup],
                      include_partial_messages=True)
        messages = list(agent.query("go"))
        assert messages[-1].subtype == "success" and messages[-1].result == "final answer"
        deltas = [m for m in messages if m.type == "stream_event"]
        assert bool(deltas) is stream
        history = agent.get_history()
        assert history[1]["provider_response_id"].startswith("msg_mock_")
        assert history[2]["content"][0]["content"] == "value of k"
        assert_well_formed(history)
        assert len(server.requests) == 2
        for body, headers in zip(server.requests, server.request_headers):
            assert body["anthropic_version"] == "bedrock-2023-05-31"
            assert "model" not in body and "stream" not in body
            assert headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ID}/")
            assert "x-amz-date" in headers and "x-amz-security-token" not in headers
        assert server.requests[1]["tools"][0]["name"] == "lookup"


@pytest.mark.parametrize("model", [ARN, "us.anthropic.claude-3-5-haiku-20241022-v1:0",
                                   "anthropic.claude v2/odd name"])
@pytest.mark.parametrize("stream", [True, False])
def test_model_ids_and_arns_are_one_signed_segment(model: str, stream: bool) -> None:
    with MockMessagesServer(["ok"]) as server:
        reply = client(server, stream=stream).create(request(model))
        assert reply["content"][0]["text"] == "ok" and reply["model"] == model


def test_session_tokens_are_sent_and_signed() -> None:
    with MockMessagesServer(["a", "b"]) as server:
        bedrock = client(server, session_token="FwoGZXIvYXdzEJr//////////session-token")
        bedrock.create(request())
        headers = server.request_headers[0]
        assert headers["x-amz-security-token"] == "FwoGZXIvYXdzEJr//////////session-token"
        assert "x-amz-security-token" in headers["authorization"]


def test_a_wrong_secret_gets_bedrocks_403() -> None:
    with MockMessagesServer() as server:
        with pytest.raises(PermissionDeniedError) as raised:
            client(server, secret_access_key="not-the-secret-key", max_retries=0).create(
                request())
        assert "signature we calculated does not match" in str(raised.value)
        assert raised.value.status_code == 403 and raised.value.request_id.startswith("mock-")
        with pytest.raises(AuthenticationError, match="security token included"):
            client(server, access_key_id="AKIAOTHER", max_retries=0).create(request())
    with MockMessagesServer(bedrock_credentials=("AKIAMINE", "my-secret")) as server:
        assert client(server, access_key_id="AKIAMINE", secret_access_key="my-secret").create(
            request())["content"]


@pytest.mark.parametrize("status, name, cls", [
    (429, "ThrottlingException", RateLimitError),
    (400, "ServiceQuotaExceededException", RateLimitError),
    (429, "ModelNotReadyException", RateLimitError),
    (503, "ServiceUnavailableException", OverloadedError),
    (403, "AccessDeniedException", PermissionDeniedError),
    (400, "ValidationException", BadRequestError),
    (404, "ResourceNotFoundException", NotFoundError),
    (424, "ModelErrorException", InternalServerError),
    (500, "InternalServerException", InternalServerError),
    (403, "UnrecognizedClientException", AuthenticationError),
    (418, "TeapotException", APIStatusError),
    (502, "BadGatewayException", InternalServerError),
])
@pytest.mark.parametrize("stream", [True, False])
def test_bedrock_errors_map_to_lattices_classes(status: int, name: str, cls: type,
                                                stream: bool) -> None:
    with MockMessagesServer([MockMessagesServer.error(status, f"{name} says no", type=name)]
                            ) as server:
        with pytest.raises(cls) as raised:
            client(server, max_retries=0, stream=stream).create(request())
        error = raised.value
        assert type(error) is cls and error.status_code == status
        assert error.message == f"{name} says no" and error.request_id.startswith("mock-")


def test_model_timeout_is_a_request_timeout_retried_as_408() -> None:
    script = [MockMessagesServer.error(408, "Model has timed out", type="ModelTimeoutException"),
              "after the timeout"]
    with MockMessagesServer(script) as server:
        policy = RetryPolicy(max_retries=1, sleep=lambda s: None)
        assert client(server, retry_policy=policy).create(request())["content"][0]["text"] == \
            "after the timeout"
    with MockMessagesServer([MockMessagesServer.error(
            408, "Model has timed out", type="ModelTimeoutException")] * 2) as server:
        with pytest.raises(RequestTimeoutError, match="Model has timed out"):
            client(server, retry_policy=policy).create(request())
        assert len(server.requests) == 2


def test_every_retry_is_signed_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    signed: List[str] = []
    original = bedrock_module.sign_headers

    def counting(*args: Any, **kwargs: Any) -> Dict[str, str]:
        headers = original(*args, **kwargs)
        signed.append(headers["x-amz-date"])
        return headers

    monkeypatch.setattr(bedrock_module, "sign_headers", counting)
    script = [MockMessagesServer.error(429, "slow down", type="ThrottlingException"),
              MockMessagesServer.error(503, "busy", type="ServiceUnavailableException"), "ok"]
    with MockMessagesServer(script) as server:
        policy = RetryPolicy(max_retries=2, sleep=lambda s: None)
        assert client(server, retry_policy=policy).create(request())["content"][0]["text"] == "ok"
    assert len(signed) == 3 == len(server.requests)
    assert [h["x-amz-date"] for h in server.request_headers] == signed


def test_overflow_recovery_on_bedrocks_prompt_too_long() -> None:
    summary = {"content": [{"type": "text", "text": "SUMMARY: looked up k twice"}]}
    too_long = MockMessagesServer.error(
        400, "prompt is too long: 250000 tokens > 200000 maximum", type="ValidationException")
    with MockMessagesServer([lookup_call, lookup_call, too_long, summary, "all done"]) as server:
        agent = Agent(model=MODEL, model_client=client(server), tools=[lookup],
                      auto_compact=AutoCompact(threshold_tokens=10**9, keep_recent_messages=2))
        messages = list(agent.query("start"))
        assert messages[-1].subtype == "success" and messages[-1].result == "all done"
        assert "SUMMARY" in str(server.requests[4]["messages"][0]["content"])
        assert_well_formed(server.requests[4]["messages"], strict_roles=True)
    with MockMessagesServer([too_long]) as server:
        with pytest.raises(PromptTooLongError):
            client(server).create(request())


def test_an_exception_frame_mid_stream_raises_its_class_and_nothing_partial_stays() -> None:
    with MockMessagesServer([MockMessagesServer.stream_error(
            "ThrottlingException", "Too many tokens", after_events=3)]) as server:
        with pytest.raises(RateLimitError, match="Too many tokens"):
            client(server).create(request())
        assert len(server.requests) == 1  # a stream that started is never retried
    with MockMessagesServer([MockMessagesServer.stream_error("overloaded_error", "busy"),
                             "later"]) as server:
        agent = Agent(model=MODEL, model_client=client(server, max_retries=0))
        with pytest.raises(OverloadedError, match="busy"):
            agent.prompt("x")
        assert [m["role"] for m in agent.get_history()] == ["user"]


def test_a_cut_stream_is_a_connection_error() -> None:
    with MockMessagesServer([MockMessagesServer.cut_stream(after_events=3)]) as server:
        with pytest.raises(APIConnectionError):
            client(server, max_retries=0).create(request())


def test_abort_mid_stream() -> None:
    with MockMessagesServer([MockMessagesServer.hang(after_events=3)]) as server:
        assert_abort_mid_stream(client(server), MODEL)


def test_timeout_mid_stream() -> None:
    with MockMessagesServer([MockMessagesServer.hang(after_events=3)]) as server:
        assert_timeout_mid_stream(client(server), MODEL)


@pytest.mark.parametrize("stream", [True, False])
def test_max_response_bytes_bounds_frames_and_bodies(stream: bool) -> None:
    big = {"type": "content_block_delta", "index": 0,
           "delta": {"type": "text_delta", "text": "x" * 20000}}
    frames = bedrock_frames([big]).decode("latin-1")  # one frame of ~27 KB
    with MockMessagesServer([MockMessagesServer.raw_sse(frames) if stream else "x" * 20000]
                            ) as server:
        bedrock = client(server, stream=stream, max_response_bytes=4096, max_retries=0)
        with pytest.raises(APIConnectionError, match="max_response_bytes"):
            bedrock.create(request())
        assert bedrock.max_response_bytes == 4096


def test_betas_go_in_the_body() -> None:
    with MockMessagesServer(["ok"]) as server:
        client(server, default_headers={"Anthropic-Beta": "context-1m-2025-08-07, x-1",
                                        "x-team": "a"}).create(request())
        assert server.requests[0]["anthropic_beta"] == ["context-1m-2025-08-07", "x-1"]
        assert "anthropic-beta" not in server.request_headers[0]
        assert server.request_headers[0]["x-team"] == "a"
