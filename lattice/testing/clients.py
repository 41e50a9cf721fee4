"""Deterministic model clients for tests: no HTTP, no threads of their own."""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable, Dict, Iterable, List, Union

from ..models.base import ModelRequest
from ..models.shape import check_depth

__all__ = ["ScriptedModelClient", "FunctionModelClient", "as_reply"]

Reply = Union[str, Dict[str, Any]]


def as_reply(reply: Reply) -> Dict[str, Any]:
    """A string is a text reply that ends the turn; a dict is taken as the reply (one
    nested deeper than 100 levels is an ``APIConnectionError``, as from a real server)."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": [{"type": "text", "text": reply}],
                "stop_reason": "end_turn"}
    if isinstance(reply, dict):
        check_depth(reply, "the scripted reply")  # deeper breaks deepcopy and the encoders
        out = dict(reply)
        out.setdefault("role", "assistant")
        if "stop_reason" not in out:
            content = out.get("content")
            has_tools = isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
            out["stop_reason"] = "tool_use" if has_tools else "end_turn"
        return out
    raise TypeError(f"a scripted reply must be a str or a dict, got {reply!r}")


def _check_record(owner: str, record: Any) -> None:
    if not isinstance(record, bool):
        raise ValueError(f"{owner} record must be True or False, got {record!r}")


class ScriptedModelClient:
    """Returns ``replies`` in order (dicts, or strings as text replies).

    Every ``ModelRequest`` it receives is kept in ``.requests`` (the request itself, not a
    copy: its ``messages`` list is made fresh for each call and the loop never edits the
    dicts in it). ``record=False`` keeps none, for long loops where only the answers
    matter; ``.calls`` counts the requests either way. Running out of replies raises
    ``AssertionError`` naming the request number: a test that asks more of the model
    than it scripted is wrong, and saying so beats inventing an answer.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, replies: Iterable[Reply], *, record: bool = True) -> None:
        _check_record("ScriptedModelClient", record)
        self.replies: List[Reply] = list(replies)
        self.requests: List[ModelRequest] = []
        self.record = record
        self.calls = 0
        self._lock = threading.Lock()

    def create(self, request: ModelRequest) -> Dict[str, Any]:
        with self._lock:
            index = self.calls
            self.calls += 1
            if self.record:
                self.requests.append(request)
            if index >= len(self.replies):
                raise AssertionError(
                    f"ScriptedModelClient ran out of replies at request {index + 1} "
                    f"(scripted {len(self.replies)})")
            reply = self.replies[index]
        if isinstance(reply, dict):
            check_depth(reply, "the scripted reply")  # before deepcopy, which recurses
            reply = copy.deepcopy(reply)
        return as_reply(reply)

    def __repr__(self) -> str:
        used = min(self.calls, len(self.replies))
        return f"<ScriptedModelClient {used}/{len(self.replies)} replies used>"


class FunctionModelClient:
    """Calls ``fn(request)`` for every request; ``fn`` returns a dict or a string.

    Requests are kept in ``.requests`` as ``ScriptedModelClient`` keeps them (references,
    no copies); ``record=False`` keeps none. ``.calls`` counts them either way.
    """

    __test__ = False

    def __init__(self, fn: Callable[[ModelRequest], Reply], *, record: bool = True) -> None:
        if not callable(fn):
            raise ValueError(f"FunctionModelClient needs a callable, got {fn!r}")
        _check_record("FunctionModelClient", record)
        self.fn = fn
        self.requests: List[ModelRequest] = []
        self.record = record
        self.calls = 0
        self._lock = threading.Lock()

    def create(self, request: ModelRequest) -> Dict[str, Any]:
        with self._lock:
            self.calls += 1
            if self.record:
                self.requests.append(request)
        return as_reply(self.fn(request))

    def __repr__(self) -> str:
        return f"<FunctionModelClient {self.fn!r}>"
