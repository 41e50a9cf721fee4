"""When and how long to wait before retrying a Messages API request.

``RetryPolicy`` is a value: the client asks it small questions (``should_retry``,
``delay``) and does the one sleep itself. ``backoff_delay``, ``parse_retry_after`` and
``status_is_retryable`` are pure functions. Time is injected (``clock``, ``wall_clock``,
``sleep``, ``random``) so tests never sleep or patch ``time``.
"""

from __future__ import annotations

import math
import random as _random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

__all__ = [
    "RetryPolicy",
    "backoff_delay",
    "parse_retry_after",
    "status_is_retryable",
    "header_value",
]

Headers = Mapping[str, Any]


def header_value(headers: Headers, name: str) -> Optional[str]:
    """``headers[name]`` matched without regard to case (``name`` given in lower case)."""
    value = headers.get(name)
    if value is None:
        for key, item in headers.items():
            if key.lower() == name:
                return str(item)
        return None
    return str(value)


def status_is_retryable(status: Optional[int], headers: Headers) -> bool:
    """Retry 408, 409, 429, 5xx (529 included) and failed connections (``status`` None).

    ``x-should-retry: true|false`` from the server overrides the status rule.
    """
    hint = header_value(headers, "x-should-retry")
    if hint is not None:
        hint = hint.strip().lower()
        if hint == "true":
            return True
        if hint == "false":
            return False
    if status is None:
        return True
    return status in (408, 409, 429) or 500 <= status < 600


def parse_retry_after(headers: Headers, now: float) -> Optional[float]:
    """Seconds the server asked us to wait, or None.

    ``retry-after-ms`` (milliseconds) wins over ``retry-after``, which is either seconds
    or an HTTP date (compared with ``now``, a Unix time). Negative waits count as zero.
    """
    raw = header_value(headers, "retry-after-ms")
    if raw is not None:
        try:
            return max(0.0, float(raw) / 1000.0)
        except ValueError:
            pass
    raw = header_value(headers, "retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        import email.utils  # ~8 ms to import; only an HTTP-date Retry-After needs it

        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:  # pragma: no cover - older Pythons return None instead of raising
        return None
    return max(0.0, when.timestamp() - now)


def backoff_delay(
    retry_number: int, *, initial: float, maximum: float, jitter: float, rand: float
) -> float:
    """``initial * 2**retry_number`` capped at ``maximum``, less up to ``jitter`` of it.

    ``rand`` in [0, 1) picks how much jitter; spreading retries keeps many clients that
    failed together from all coming back at the same instant.
    """
    base = min(maximum, initial * (2.0 ** retry_number))
    return base * (1.0 - jitter * rand)


@dataclass(frozen=True)
class RetryPolicy:
    """How an ``AnthropicClient`` retries.

    Attributes:
        max_retries: retries after the first attempt (0 disables retrying).
        initial_delay: the first backoff, in seconds; it doubles on every retry.
        max_delay: the cap on one backoff.
        jitter: the largest fraction taken off a backoff at random.
        max_retry_after: a server's ``retry-after`` longer than this is ignored in favour
            of the backoff (a long wait is better decided by the caller).
        sleep: ``sleep(seconds)`` to wait between attempts; None (the default) waits on
            the request's abort signal, so an abort ends the wait at once.
        clock: a monotonic clock in seconds, for deadlines.
        wall_clock: Unix time, for ``retry-after`` HTTP dates.
        random: a source of floats in [0, 1), for jitter.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    sleep: Optional[Callable[[float], Any]] = None
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    random: Callable[[], float] = _random.random

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        for name, top in (("initial_delay", None), ("max_delay", None),
                          ("max_retry_after", None), ("jitter", 1)):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0
                    or (top is not None and value > top)):
                wanted = ("a finite number >= 0" if top is None
                          else f"a number between 0 and {top}")
                raise ValueError(f"{name} must be {wanted}, got {value!r}")

    def should_retry(self, retries_done: int, status: Optional[int], headers: Headers) -> bool:
        """True if a failure (``status`` None for a connection error) deserves a retry."""
        return retries_done < self.max_retries and status_is_retryable(status, headers)

    def delay(self, retries_done: int, headers: Headers) -> float:
        """Seconds to wait before retry number ``retries_done + 1``."""
        hinted = parse_retry_after(headers, self.wall_clock())
        if hinted is not None and hinted <= self.max_retry_after:
            return hinted
        return backoff_delay(
            retries_done,
            initial=self.initial_delay,
            maximum=self.max_delay,
            jitter=self.jitter,
            rand=self.random(),
        )
