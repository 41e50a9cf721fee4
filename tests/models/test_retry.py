"""The retry policy's pure parts: which failures retry, and how long to wait."""

from __future__ import annotations

import email.utils
from typing import Dict

import pytest
import requests
import responses
from helpers import ANTHROPIC_KEY as KEY
from helpers import ANTHROPIC_MESSAGE as MESSAGE
from helpers import ANTHROPIC_URL as URL
from helpers import FakeTime
from helpers import anthropic_client as client
from helpers import anthropic_error_body as error_body
from helpers import anthropic_request as request

from lattice.cancellation import AbortController
from lattice.errors import (
    AbortError,
    APIConnectionError,
    APIStatusError,
    OverloadedError,
    RateLimitError,
    RequestTimeoutError,
)
from lattice.models.anthropic import AnthropicClient
from lattice.models.retry import (
    RetryPolicy,
    backoff_delay,
    header_value,
    parse_retry_after,
    status_is_retryable,
)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, None])
def test_retryable_statuses_and_connection_errors(status: object) -> None:
    assert status_is_retryable(status, {})  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_client_errors_are_not_retried(status: int) -> None:
    assert not status_is_retryable(status, {})


def test_x_should_retry_overrides_the_status_rule() -> None:
    assert status_is_retryable(400, {"x-should-retry": "true"})
    assert not status_is_retryable(529, {"X-Should-Retry": "false"})
    assert not status_is_retryable(None, {"x-should-retry": " FALSE "})
    assert status_is_retryable(503, {"x-should-retry": "maybe"})  # unknown hint: ignored


def test_header_lookup_ignores_case() -> None:
    assert header_value({"Retry-After": "3"}, "retry-after") == "3"
    assert header_value({}, "retry-after") is None


def test_retry_after_seconds_ms_and_http_date() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"retry-after": "2"}, now) == 2.0
    assert parse_retry_after({"retry-after": "1.5"}, now) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}, now) == 0.25
    assert parse_retry_after({"retry-after-ms": "junk", "retry-after": "9"}, now) == 9.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after({"retry-after": past}, now) == 0.0
    assert parse_retry_after({"retry-after": "-3"}, now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}, now) is None
    assert parse_retry_after({}, now) is None


def test_backoff_doubles_caps_and_jitters() -> None:
    kw = {"initial": 0.5, "maximum": 8.0, "jitter": 0.25}
    assert [backoff_delay(n, rand=0.0, **kw) for n in range(6)] == [0.5, 1, 2, 4, 8, 8]
    assert backoff_delay(0, rand=0.999, **kw) == pytest.approx(0.5 * 0.75, rel=1e-2)
    assert backoff_delay(1, rand=0.5, **kw) == pytest.approx(0.875)


def test_policy_delay_prefers_a_sane_retry_after() -> None:
    policy = RetryPolicy(random=lambda: 0.0, wall_clock=lambda: 1_700_000_000.0)
    assert policy.delay(0, {}) == 0.5
    assert policy.delay(2, {}) == 2.0
    assert policy.delay(0, {"retry-after": "3"}) == 3.0
    assert policy.delay(0, {"retry-after": "600"}) == 0.5  # longer than max_retry_after
    assert policy.delay(1, {"retry-after-ms": "10"}) == 0.01


def test_policy_should_retry_counts_retries() -> None:
    policy = RetryPolicy(max_retries=2)
    assert policy.should_retry(0, 529, {}) and policy.should_retry(1, None, {})
    assert not policy.should_retry(2, 529, {})
    assert not policy.should_retry(0, 400, {})
    assert not RetryPolicy(max_retries=0).should_retry(0, 529, {})


@pytest.mark.parametrize("kwargs", [
    {"max_retries": -1}, {"max_retries": True}, {"max_retries": 1.5},
    {"initial_delay": -1}, {"max_delay": "x"}, {"jitter": 2}, {"jitter": "a"}, {"jitter": True},
])
def test_bad_policy_values(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)


def test_policy_is_a_frozen_value() -> None:
    policy = RetryPolicy()
    with pytest.raises(AttributeError):
        policy.max_retries = 5  # type: ignore[misc]
    assert RetryPolicy(max_retries=3) == RetryPolicy(max_retries=3)


# -- AnthropicClient's retries over mocked HTTP (``responses``), on an injected clock --------


pytestmark = pytest.mark.usefixtures("clean_anthropic_env")


@responses.activate
def test_retries_then_succeeds_with_backoff() -> None:
    responses.add(responses.POST, URL, status=529, json=error_body("overloaded_error", "busy"))
    responses.add(responses.POST, URL, status=500, json=error_body("api_error", "oops"))
    responses.add(responses.POST, URL, json=MESSAGE)
    fake = FakeTime()
    assert client(fake).create(request())["content"] == MESSAGE["content"]
    assert len(responses.calls) == 3
    assert fake.sleeps == [0.5, 1.0]


@pytest.mark.parametrize(("headers", "delay"), [
    ({"retry-after": "3"}, 3.0), ({"retry-after-ms": "1500"}, 1.5),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
])
@responses.activate
def test_retry_after_honoured(headers: Dict[str, str], delay: float) -> None:
    responses.add(responses.POST, URL, status=429, headers=headers,
                  json=error_body("rate_limit_error", "slow down"))
    responses.add(responses.POST, URL, json=MESSAGE)
    fake = FakeTime()
    client(fake).create(request())
    assert fake.sleeps == [delay]


@responses.activate
def test_x_should_retry_false_stops_a_529() -> None:
    responses.add(responses.POST, URL, status=529, headers={"x-should-retry": "false"},
                  json=error_body("overloaded_error", "busy"))
    with pytest.raises(OverloadedError):
        client().create(request())
    assert len(responses.calls) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404])
@responses.activate
def test_no_retry_on_client_errors(status: int) -> None:
    responses.add(responses.POST, URL, status=status, json=error_body("x", "no"))
    fake = FakeTime()
    with pytest.raises(APIStatusError):
        client(fake).create(request())
    assert len(responses.calls) == 1 and fake.sleeps == []


@pytest.mark.parametrize("status, headers", [
    (408, {}), (409, {}),
    (400, {"x-should-retry": "true"}),  # the server's hint overrides the status rule
])
@responses.activate
def test_retried_statuses(status: int, headers: Dict[str, str]) -> None:
    responses.add(responses.POST, URL, status=status, headers=headers,
                  json=error_body("x", "again"))
    responses.add(responses.POST, URL, json=MESSAGE)
    client().create(request())
    assert len(responses.calls) == 2


@responses.activate
def test_max_retries_exhausted_raises_last_error() -> None:
    for i in range(5):
        responses.add(responses.POST, URL, status=529, json=error_body("overloaded_error", f"b{i}"))
    fake = FakeTime()
    with pytest.raises(OverloadedError, match="b3"):
        client(fake, max_retries=3).create(request())
    assert len(responses.calls) == 4 and fake.sleeps == [0.5, 1.0, 2.0]


@responses.activate
def test_connection_errors_retried_then_raised_naming_their_cause() -> None:
    for _ in range(3):
        responses.add(responses.POST, URL, body=requests.ConnectionError("refused"))
    with pytest.raises(APIConnectionError, match="refused") as info:
        client().create(request())
    assert len(responses.calls) == 3
    # SPEC 21b: not chained (requests' error names the URL whole), its type named instead
    assert info.value.__cause__ is None and "ConnectionError: " in str(info.value)


@responses.activate
def test_connection_error_then_success() -> None:
    responses.add(responses.POST, URL, body=requests.ConnectionError("reset"))
    responses.add(responses.POST, URL, json=MESSAGE)
    assert client().create(request())["provider_response_id"] == "msg_01abc"


@pytest.mark.parametrize("exc", [requests.ReadTimeout("slow"), requests.ConnectTimeout("slow")])
@responses.activate
def test_own_timeouts_are_not_retried(exc: Exception) -> None:
    responses.add(responses.POST, URL, body=exc)
    responses.add(responses.POST, URL, json=MESSAGE)
    with pytest.raises(RequestTimeoutError):
        client().create(request())
    assert len(responses.calls) == 1


@responses.activate
def test_retry_never_outlives_the_deadline() -> None:
    responses.add(responses.POST, URL, status=429, headers={"retry-after": "5"},
                  json=error_body("rate_limit_error", "wait 5 s"))
    fake = FakeTime()
    with pytest.raises(RateLimitError):
        client(fake).create(request(timeout_ms=4000))  # 5 s wait > 4 s deadline
    assert fake.sleeps == [] and len(responses.calls) == 1


@responses.activate
def test_client_timeout_ms_is_the_default_deadline() -> None:
    responses.add(responses.POST, URL, status=529, json=error_body("overloaded_error", "busy"))
    fake = FakeTime()
    with pytest.raises(OverloadedError):
        client(fake, timeout_ms=400).create(request())  # backoff 0.5 s > 0.4 s
    assert fake.sleeps == []


@responses.activate
def test_abort_during_retry_wait_raises_the_reason() -> None:
    responses.add(responses.POST, URL, status=529, json=error_body("overloaded_error", "busy"))
    controller = AbortController()
    fake = FakeTime()

    def sleep(seconds: float) -> None:
        fake.sleep(seconds)
        controller.abort()

    policy = RetryPolicy(sleep=sleep, clock=fake.clock)
    c = AnthropicClient(KEY, retry_policy=policy, stream=False)
    with pytest.raises(AbortError):
        c.create(request(signal=controller.signal))
    assert len(responses.calls) == 1


@responses.activate
def test_retry_sleeps_on_the_signal_by_default() -> None:
    # No injected sleep: the wait is signal.wait(delay), so an abort ends it at once.
    responses.add(responses.POST, URL, status=529, headers={"retry-after-ms": "1"},
                  json=error_body("overloaded_error", "busy"))
    responses.add(responses.POST, URL, json=MESSAGE)
    AnthropicClient(KEY, stream=False).create(request())
    assert len(responses.calls) == 2
