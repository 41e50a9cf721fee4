"""The cassette ``Recorder`` writes and ``Replayer`` reads: format, redaction, comparison.

A cassette is one JSON object::

    {"format": "lattice-cassette", "version": 1, "provider": "anthropic", "interactions": [
        {"request": {...}, "events": [...], "reply": {...}},
        {"request": {...}, "events": [...], "error": {"type": "OverloadedError", ...}},
        {"count_tokens": {...}, "input_tokens": 42}, ...]}

``request`` holds what a ``ModelRequest`` says about the model call (``COMPARED``, plus
``extra``); what changes from run to run (``timeout_ms``, ``signal``, ``on_event``) is not
kept. A request's ``messages`` that begin with the previous request's (a tool loop sends
the whole conversation again each turn) are kept as ``{"previous": n, "then": [...]}``:
the previous request's first ``n`` messages, then these; so a cassette grows with the
conversation, not with its square. ``events`` are the streamed events the client gave
``on_event``, in order, in its own wire format (Messages SSE events, Chat or Responses
chunks): a replay gives them back.

Secrets never reach the file: the values a client holds (keys, tokens, AWS secrets, the
values of its default headers), the usual provider variables' values from the environment,
values under a secret-looking key (``api_key``, ``authorization``, ...) and strings shaped
like a provider key (``sk-...``, ``AKIA...``, ``ya29. ...``, ``Bearer ...``) become
``REDACTED``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from typing import Any, Dict, Iterable, List, Optional

from ..models.base import ModelRequest

__all__ = ["FORMAT", "VERSION", "REDACTED", "COMPARED", "request_record", "comparable",
           "Redactor", "comparable_of", "diff", "shorten", "expand", "load", "error_record",
           "error_from_record"]

FORMAT, VERSION = "lattice-cassette", 1
REDACTED = "REDACTED"
# What a replay compares (SPEC 25a); timeout_ms, signal and on_event are volatile.
COMPARED = ("model", "system", "messages", "tools", "max_tokens", "output_format")

_SECRET_KEYS = frozenset((
    "api_key", "api-key", "apikey", "x-api-key", "authorization", "proxy-authorization",
    "access_token", "auth_token", "token", "secret", "secret_access_key", "session_token",
    "password", "x-goog-api-key", "client_secret", "refresh_token", "id_token"))
_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY",
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GEMINI_API_KEY",
        "GOOGLE_API_KEY")
# What a client keeps its credentials in (the built-in clients' attribute names).
_ATTRIBUTES = ("_api_key", "_auth_token", "_access_token", "_azure_key", "_key",
               "access_key_id", "_google_api_key")
_SHAPES = re.compile(
    r"\b(?:sk-(?:ant-)?[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}"
    r"|ya29\.[A-Za-z0-9_\-.]{10,}|AIza[0-9A-Za-z_\-]{30,})"
    r"|(?i:bearer)\s+[A-Za-z0-9_\-.=/+]{12,}")


class Redactor:
    """Replaces secrets in JSON-ready values (see the module docstring)."""

    def __init__(self, secrets: Iterable[Optional[str]] = ()) -> None:
        found = {s for s in secrets if isinstance(s, str) and len(s) >= 6}
        found.update(v for v in (os.environ.get(name) for name in _ENV) if v and len(v) >= 6)
        self.secrets = sorted(found, key=len, reverse=True)  # longest first: no partials

    @classmethod
    def for_client(cls, client: Any) -> Redactor:
        """A redactor that knows the secrets ``client`` holds (and a wrapped client's)."""
        return cls(client_secrets(client))

    def text(self, value: str) -> str:
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return _SHAPES.sub(REDACTED, value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: REDACTED if str(key).lower() in _SECRET_KEYS and item
                    else self(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(item) for item in value]
        return value


def client_secrets(client: Any, depth: int = 0) -> List[str]:
    """The credential values ``client`` holds in its usual attributes (and its default
    headers' values, its AWS credentials, a wrapped client's)."""
    found: List[str] = []
    if client is None or depth > 3:
        return found
    for name in _ATTRIBUTES:
        value = getattr(client, name, None)
        if isinstance(value, str):
            found.append(value)
    credentials = getattr(client, "_credentials", None)
    for name in ("secret_access_key", "session_token", "access_key_id"):
        value = getattr(credentials, name, None)
        if isinstance(value, str):
            found.append(value)
    headers = getattr(client, "_default_headers", None)
    if isinstance(headers, dict):
        found.extend(v for v in headers.values() if isinstance(v, str))
    transport = getattr(client, "_transport", None)
    found.extend(getattr(transport, "url_secrets", None) or ())
    for inner in [getattr(client, "client", None), *(getattr(client, "clients", None) or ())]:
        if inner is not client:
            found.extend(client_secrets(inner, depth + 1))
    return found


def _jsonable(value: Any) -> Any:
    """``value`` through JSON and back (tuples become lists; what JSON cannot hold, its
    ``repr``), so that a recorded and a live request compare alike."""
    return json.loads(json.dumps(value, default=repr))


def request_record(request: ModelRequest) -> Dict[str, Any]:
    """What a cassette keeps of ``request``: the compared fields and ``extra``."""
    record = {name: getattr(request, name) for name in COMPARED}
    if request.extra:
        record["extra"] = request.extra
    return _jsonable(record)  # type: ignore[no-any-return]


def comparable(record: Dict[str, Any]) -> Dict[str, Any]:
    """The part of a request record a replay compares."""
    return {name: record.get(name) for name in COMPARED}


def shorten(messages: Any, previous: Optional[List[Any]]) -> Any:
    """``messages`` as a cassette keeps them after ``previous`` (the last request's, in
    full): ``{"previous": n, "then": rest}`` when they share a first ``n`` > 0."""
    if type(messages) is not list or not previous:
        return messages
    shared = 0
    for mine, theirs in zip(messages, previous):
        if mine != theirs:
            break
        shared += 1
    return {"previous": shared, "then": messages[shared:]} if shared else messages


def expand(interactions: List[Dict[str, Any]], path: str) -> List[Dict[str, Any]]:
    """``interactions`` with every request's ``messages`` in full (``shorten`` undone)."""
    previous: List[Any] = []
    for number, record in enumerate(interactions, 1):
        request = record.get("request") if isinstance(record, dict) else None
        if not isinstance(request, dict):
            continue
        messages = request.get("messages")
        if isinstance(messages, dict):
            shared, rest = messages.get("previous"), messages.get("then")
            if not isinstance(shared, int) or not 0 < shared <= len(previous) or \
                    not isinstance(rest, list):
                raise ValueError(f"cassette {path!r}, call {number}: messages "
                                 f"{{'previous': {shared!r}, ...}} do not follow the "
                                 "request before")
            messages = request["messages"] = previous[:shared] + rest
        if isinstance(messages, list):
            previous = messages
    return interactions


def comparable_of(request: ModelRequest) -> Dict[str, Any]:
    """``comparable(request_record(request))`` without the copy, for a first look: equal
    to a recorded one only when nothing needed redacting or JSON's normalizing."""
    return {name: getattr(request, name) for name in COMPARED}


def diff(recorded: Any, actual: Any) -> str:
    """A unified diff of two JSON values, as indented JSON (keys sorted)."""
    def lines(value: Any) -> List[str]:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    return "\n".join(difflib.unified_diff(lines(recorded), lines(actual), "recorded",
                                          "this run", lineterm="", n=3))


def error_record(exc: BaseException) -> Dict[str, Any]:
    """An exception as a cassette keeps it: its class name and what it was built with."""
    record: Dict[str, Any] = {"type": type(exc).__name__,
                              "message": str(getattr(exc, "message", None) or exc)}
    for name in ("status_code", "request_id", "kind"):
        value = getattr(exc, name, None)
        if value is not None:
            record[name] = value
    return record


def error_from_record(record: Dict[str, Any]) -> BaseException:
    """The exception a recorded error names (a lattice error class; else ``APIError``)."""
    from .. import errors

    name = record.get("type")
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    message = str(record.get("message", "recorded error"))
    if isinstance(cls, type) and issubclass(cls, errors.APIError) and \
            cls is not errors.ReplyRejectedError:
        return cls(message, status_code=record.get("status_code"),
                   request_id=record.get("request_id"))
    if cls is errors.RequestTimeoutError:
        return errors.RequestTimeoutError(message, kind=record.get("kind") or "request")
    if isinstance(cls, type) and issubclass(cls, errors.LatticeError):
        try:
            return cls(message)
        except TypeError:
            pass
    return errors.APIError(f"{name}: {message}")


def load(path: str) -> Dict[str, Any]:
    """The cassette at ``path``, its requests' messages in full (a clear error for
    anything that is not a cassette)."""
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except FileNotFoundError:
        raise FileNotFoundError(f"no cassette at {path!r}: record one with "
                                "lattice.testing.Recorder first") from None
    except ValueError as exc:
        raise ValueError(f"cassette {path!r} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or \
            not isinstance(data.get("interactions"), list):
        raise ValueError(f"{path!r} is not a lattice cassette (no format "
                         f"{FORMAT!r} with a list of interactions)")
    if data.get("version") != VERSION:
        raise ValueError(f"cassette {path!r} has version {data.get('version')!r}; this "
                         f"lattice reads version {VERSION}")
    expand(data["interactions"], path)
    return data
