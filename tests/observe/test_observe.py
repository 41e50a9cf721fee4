"""The observer seam: the no-op base class and ``ObserverGroup``."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import pytest

from lattice.messages import ResultMessage
from lattice.models.base import ModelRequest
from lattice.observe.observer import Observer, ObserverGroup


class Recorder(Observer):
    """Returns its own tokens and records what came back."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.events: List[Any] = []

    def query_start(self, model: Optional[str], prompt: Any) -> Any:
        self.events.append(("query_start", model, prompt))
        return f"{self.name}-q"

    def query_end(self, token: Any, result: Optional[ResultMessage],
                  error: Optional[BaseException]) -> None:
        self.events.append(("query_end", token, result.subtype if result else None, error))

    def model_start(self, query: Any, request: ModelRequest) -> Any:
        self.events.append(("model_start", query, request.model))
        return f"{self.name}-m"

    def model_end(self, token: Any, reply: Optional[Dict[str, Any]],
                  error: Optional[BaseException]) -> None:
        self.events.append(("model_end", token, reply is not None, error))

    def tool_start(self, query: Any, call: Any) -> Any:
        self.events.append(("tool_start", query, call.name))
        return f"{self.name}-t"

    def tool_end(self, token: Any, result: Optional[Dict[str, Any]],
                 error: Optional[BaseException]) -> None:
        self.events.append(("tool_end", token, result, error))


class Broken(Observer):
    def query_start(self, model: Optional[str], prompt: Any) -> Any:
        raise RuntimeError("observer bug")

    def tool_end(self, token: Any, result: Optional[Dict[str, Any]],
                 error: Optional[BaseException]) -> None:
        raise RuntimeError("observer bug in tool_end")


def drive(observer: Observer) -> None:
    q = observer.query_start("m", "hi")
    m = observer.model_start(q, ModelRequest(model="m", messages=[]))
    observer.model_end(m, {"content": []}, None)
    t = observer.tool_start(q, SimpleNamespace(id="t1", name="read", input={}))
    observer.tool_end(t, {"type": "tool_result", "tool_use_id": "t1", "content": "x"}, None)
    observer.query_end(q, ResultMessage("success"), None)


def test_the_base_class_does_nothing() -> None:
    observer = Observer()
    drive(observer)
    assert observer.query_start("m", "x") is None
    assert observer.model_start(None, ModelRequest(model="m", messages=[])) is None


def test_a_group_routes_each_observers_own_tokens(caplog: pytest.LogCaptureFixture) -> None:
    a, b = Recorder("a"), Recorder("b")
    group = ObserverGroup([a, Broken(), b])
    with caplog.at_level(logging.WARNING, logger="lattice"):
        drive(group)
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "x"}
    for rec in (a, b):
        n = rec.name
        assert rec.events == [
            ("query_start", "m", "hi"), ("model_start", f"{n}-q", "m"),
            ("model_end", f"{n}-m", True, None), ("tool_start", f"{n}-q", "read"),
            ("tool_end", f"{n}-t", result, None), ("query_end", f"{n}-q", "success", None)]
    # The broken observer was logged twice (its two failing events), the query went on.
    failures = [r for r in caplog.records if "failed in" in r.getMessage()]
    assert [r.getMessage().split(" failed in ")[1] for r in failures] == [
        "query_start", "tool_end"]
    assert all(r.exc_info for r in failures)


def test_a_group_given_a_foreign_token_passes_none() -> None:
    a = Recorder("a")
    group = ObserverGroup([a])
    group.model_end(None, None, None)
    group.tool_end("not ours", None, None)
    assert a.events == [("model_end", None, False, None), ("tool_end", None, None, None)]
    assert "Recorder" in repr(group)
