"""Deterministic model clients for tests: no HTTP, no threads of their own."""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable, Dict, Iterable, List, Union

from ..models.base import ModelRequest

__all__ = ["ScriptedModelClient", "FunctionModelClient", "as_reply"]

Reply = Union[str, Dict[str, Any]]


def as_reply(reply: Reply) -> Dict[str, Any]:
    """A string is a text reply that ends the turn; a dict is taken as the reply."""
    if isinstance(reply, str):
        return {"role": "assistant", "content": [{"type": "text", "text": reply}],
                "stop_reason": "end_turn"}
    if isinstance(reply, dict):
        out = dict(reply)
        out.setdefault("role", "assistant")
        if "stop_reason" not in out:
            content = out.get("content")
            has_tools = isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
            out["stop_reason"] = "tool_use" if has_tools else "end_turn"
        return out
    raise TypeError(f"a scripted reply must be a str or a dict, got {reply!r}")


class ScriptedModelClient:
    """Returns ``replies`` in order (dicts, or strings as text replies).

    Every ``ModelRequest`` it receives is kept in ``.requests``. Running out of replies
    raises ``AssertionError`` naming the request number: a test that asks more of the
    model than it scripted is wrong, and saying so beats inventing an answer.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, replies: Iterable[Reply]) -> None:
        self.replies: List[Reply] = list(replies)
        self.requests: List[ModelRequest] = []
        self._lock = threading.Lock()

    def create(self, request: ModelRequest) -> Dict[str, Any]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            if index >= len(self.replies):
                raise AssertionError(
                    f"ScriptedModelClient ran out of replies at request {index + 1} "
                    f"(scripted {len(self.replies)})")
            reply = self.replies[index]
        return as_reply(copy.deepcopy(reply) if isinstance(reply, dict) else reply)

    def __repr__(self) -> str:
        return f"<ScriptedModelClient {len(self.requests)}/{len(self.replies)} replies used>"


class FunctionModelClient:
    """Calls ``fn(request)`` for every request; ``fn`` returns a dict or a string."""

    __test__ = False

    def __init__(self, fn: Callable[[ModelRequest], Reply]) -> None:
        if not callable(fn):
            raise ValueError(f"FunctionModelClient needs a callable, got {fn!r}")
        self.fn = fn
        self.requests: List[ModelRequest] = []

    def create(self, request: ModelRequest) -> Dict[str, Any]:
        self.requests.append(request)
        return as_reply(self.fn(request))

    def __repr__(self) -> str:
        return f"<FunctionModelClient {self.fn!r}>"
