"""The retry policy's pure parts: which failures retry, and how long to wait."""

from __future__ import annotations

import email.utils

import pytest

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
