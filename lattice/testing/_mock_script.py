"""The mock server's script: what a scripted reply may be (``Fault`` for misbehaviours)
and the checks that refuse a reply it could not answer with, up front."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

__all__ = ["DEFAULT_TEXT", "Fault", "error", "delay", "hang", "cut_stream", "stream_error",
           "raw_sse", "trickle"]

DEFAULT_TEXT = "(mock) ok"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Fault:
    """A scripted misbehaviour; build one with the ``MockMessagesServer`` helpers."""

    kind: str
    status: int = 200
    message: str = ""
    error_type: Optional[str] = None
    headers: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    reply: Any = None
    after_events: Optional[int] = None
    text: str = ""
    chunk_size: Optional[int] = None
    chunked: bool = True

    def __post_init__(self) -> None:
        def bad(value: Any, low: float, optional: bool = False, integer: bool = True) -> bool:
            if value is None:
                return not optional
            kinds = int if integer else (int, float)
            return isinstance(value, bool) or not isinstance(value, kinds) or value < low

        low_status = 300 if self.kind == "error" else 200
        for name, wrong, wanted in (
            ("kind", self.kind not in _FAULT_KINDS, f"one of {sorted(_FAULT_KINDS)}"),
            ("status", bad(self.status, low_status) or self.status > 599,
             f"an HTTP status {low_status}-599"),
            ("seconds", bad(self.seconds, 0, integer=False), "a number >= 0"),
            ("after_events", bad(self.after_events, 0, optional=True), "an int >= 0 or None"),
            ("chunk_size", bad(self.chunk_size, 1, optional=True), "an int >= 1 or None"),
        ):
            if wrong:
                raise ValueError(f"MockMessagesServer fault {name} must be {wanted}, "
                                 f"got {getattr(self, name)!r}")
        if self.reply is not None:
            _check_reply(self.reply)


_FAULT_KINDS = frozenset(
    ["error", "delay", "hang", "cut", "stream_error", "raw_sse", "trickle"])
_FAULT_MAKERS = ("error", "delay", "hang", "cut_stream", "stream_error", "raw_sse", "trickle")


def _check_reply(reply: Any) -> None:
    if isinstance(reply, (str, Fault)) or callable(reply):
        return
    if not isinstance(reply, dict):
        raise ValueError("MockMessagesServer: a scripted reply must be a str, a dict, a "
                         f"callable or a Fault, got {reply!r}")
    content = reply.get("content")
    if not (content is None or isinstance(content, str) or (
            isinstance(content, list) and all(isinstance(b, dict) for b in content))):
        raise ValueError("MockMessagesServer: reply content must be a str or a list of "
                         f"block dicts, got {content!r}")
    if not isinstance(reply.get("usage") or {}, dict):
        raise ValueError(f"MockMessagesServer: reply usage must be a dict, got "
                         f"{reply['usage']!r}")


# -- the fault makers (also MockMessagesServer.error, .delay, ...) ---------------------

def error(
    status: int,
    message: str = "mock error",
    *,
    type: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> Fault:
    """An HTTP error status with an Anthropic error body (``type`` from the status)."""
    return Fault("error", status=status, message=message, error_type=type,
                 headers=dict(headers or {}))

def delay(seconds: float, reply: Any = DEFAULT_TEXT) -> Fault:
    """Wait ``seconds`` (less if the server closes), then answer ``reply``."""
    return Fault("delay", seconds=seconds, reply=reply)

def hang(after_events: Optional[int] = None, reply: Any = DEFAULT_TEXT) -> Fault:
    """Never answer (or stream ``after_events`` events of ``reply``, then stall)."""
    return Fault("hang", after_events=after_events, reply=reply)

def cut_stream(after_events: int = 2, reply: Any = DEFAULT_TEXT) -> Fault:
    """Send the first ``after_events`` events, then drop the connection."""
    return Fault("cut", after_events=after_events, reply=reply)

def stream_error(
    type: str = "overloaded_error",
    message: str = "Overloaded",
    *,
    after_events: int = 1,
    reply: Any = DEFAULT_TEXT,
) -> Fault:
    """Start streaming ``reply``, then send an ``error`` event and end the stream."""
    return Fault("stream_error", error_type=type, message=message,
                 after_events=after_events, reply=reply)

def raw_sse(
    text: Union[str, bytes], *, chunk_size: Optional[int] = None, chunked: bool = True
) -> Fault:
    """Answer 200 with ``text`` as the SSE body, verbatim, written ``chunk_size`` bytes
    at a time if asked; ``chunked=False`` sends it HTTP/1.0 style, ended by closing."""
    raw = text.decode("utf-8") if isinstance(text, bytes) else text
    return Fault("raw_sse", text=raw, chunk_size=chunk_size, chunked=chunked)

def trickle(interval: float = 0.05) -> Fault:
    """Send ``message_start``, then a ``ping`` every ``interval`` s until closed."""
    return Fault("trickle", seconds=interval)
