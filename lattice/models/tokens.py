"""Calling a ``token_provider()``: part of the client, like its transport (SPEC 21b).

Every client with a token provider (Vertex, Azure Chat and Responses, OpenAI Responses)
asks it through ``ask_provider``, which makes the same promises on all of them:

* what the provider raises becomes ``AuthenticationError`` ("the token provider failed:
  <type>: <message>", secret-shaped text redacted from the message); the original is its
  ``__cause__`` only when neither its message nor its arguments hold secret-shaped text;
* what it returns must be a non-empty str without control characters, else
  ``AuthenticationError`` (never showing the value);
* with a deadline (the request's) or an abort signal, the provider runs on a thread of its
  own, which we stop waiting for at the deadline (``RequestTimeoutError``) or the abort
  (the signal's reason). The thread ends when the provider returns, however late, and
  nothing holds what it returned: no thread is left behind but one that is still inside
  the provider. Without either, the provider is called inline.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, List, Optional

from ..errors import AbortError, AuthenticationError, RequestTimeoutError
from .options import check_secret

__all__ = ["ask_provider", "provider_failure", "SECRET_SHAPED"]

# What looks like a credential in an error message: a bearer value, a name=value pair
# naming a secret, a JWT, or a long run of token characters.
SECRET_SHAPED = re.compile(
    r"(?i)(?:bearer\s+\S+"
    r"|(?:token|key|secret|password|passwd|pwd|authorization|credential)s?['\"]?\s*[:=]\s*"
    r"['\"]?[^\s'\",;&]+"
    r"|eyJ[\w-]{4,}\.[\w-]+\.?[\w-]*"
    r"|[A-Za-z0-9_\-+/.~]{24,}=*)")


def provider_failure(exc: BaseException) -> AuthenticationError:
    """The error for a provider that raised ``exc``: its type and redacted message."""
    message = str(exc)
    redacted = SECRET_SHAPED.sub("***", message)
    error = AuthenticationError(
        f"the token provider failed: {type(exc).__name__}: {redacted}".rstrip(": "),
        status_code=None)
    shaped = redacted != message or any(
        SECRET_SHAPED.search(repr(arg)) for arg in getattr(exc, "args", ()))
    error.__cause__ = None if shaped else exc
    error.__suppress_context__ = True
    return error


def _checked(token: Any) -> str:
    if not isinstance(token, str) or not token.strip():
        raise AuthenticationError("token_provider() must return the token as a non-empty "
                                  f"str, got {type(token).__name__}", status_code=None)
    try:
        return check_secret("token", token, "the token token_provider() returned") or ""
    except ValueError as exc:
        raise AuthenticationError(str(exc), status_code=None) from None


def ask_provider(provider: Callable[[], Any], *, deadline: Optional[float] = None,
                 signal: Any = None, clock: Callable[[], float] = time.monotonic) -> str:
    """``provider()``'s token, checked; bounded by ``deadline`` (on ``clock``) and
    ``signal`` (an ``AbortSignal``) when given."""
    if deadline is None and signal is None:
        try:
            token = provider()
        except Exception as exc:  # (a BaseException such as KeyboardInterrupt passes)
            failure = provider_failure(exc)
        else:
            return _checked(token)
        raise failure  # outside the except: no __context__ holding the original
    return _checked(_on_a_thread(provider, deadline, signal, clock))


def _on_a_thread(provider: Callable[[], Any], deadline: Optional[float], signal: Any,
                 clock: Callable[[], float]) -> Any:
    done = threading.Event()
    box: List[Any] = []  # [("ok", token)] or [("error", exception)], once

    def run() -> None:
        try:
            box.append(("ok", provider()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who decides
            box.append(("error", exc))
        done.set()

    worker = threading.Thread(target=run, name="lattice-token-provider", daemon=True)
    worker.start()
    remove = None
    if signal is not None:
        signal.add_callback(done.set)
        remove = signal.remove_callback
    try:
        left = None if deadline is None else deadline - clock()
        if left is None or left > 0:
            done.wait(left)
    finally:
        if remove is not None:
            remove(done.set)
    if not box:  # the deadline or an abort came first; the thread ends with the provider
        if signal is not None and getattr(signal, "aborted", False):
            reason = getattr(signal, "reason", None)
            raise reason if isinstance(reason, BaseException) else AbortError(str(reason))
        raise RequestTimeoutError("model request timed out waiting for the token provider",
                                  kind="request")
    kind, value = box.pop()
    if kind == "error":
        if not isinstance(value, Exception):
            raise value  # KeyboardInterrupt and the like, as they are
        raise provider_failure(value)
    return value
