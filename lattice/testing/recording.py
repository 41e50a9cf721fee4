"""``Recorder`` and ``Replayer``: record a model client's traffic once, replay it offline.

``Recorder(client, path)`` is a model client around ``client``: each request, the events
the client streamed to ``on_event`` and the reply (or the error) are appended to the JSON
cassette at ``path`` (``_cassette.py``: the format and what is redacted), written out after
every call, so a run that dies still leaves what it did. ``Replayer(path)`` is a model
client that answers each request from the cassette, in order: it first checks the request
against the recorded one (model, system, messages, tools, max_tokens and output format;
``timeout_ms``, ``signal`` and ``on_event`` are volatile) and fails with an
``AssertionError`` showing a diff, then gives the recorded events to ``on_event`` (so
``query()`` streams as it did) and returns the recorded reply, or raises the recorded
error. Both work at the ``ModelRequest`` level, so every client's wire format records the
same way; a reply keeps its provider keys (``openai_items``) and ``model``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
from typing import Any, Callable, Dict, List, Optional, Union

from ..messages import copy_json
from ..models.base import ModelClient, ModelRequest, ReplyDict, as_model_client
from ._cassette import (
    FORMAT,
    VERSION,
    Redactor,
    comparable,
    comparable_of,
    diff,
    error_from_record,
    error_record,
    load,
    request_record,
    shorten,
)

__all__ = ["Recorder", "Replayer"]

PathLike = Union[str, "os.PathLike[str]"]


class Recorder:
    """A model client that records ``client``'s traffic into the cassette at ``path``.

    The cassette is started afresh (an existing file is replaced on the first call) and
    rewritten whole after each call (atomically: a reader never sees half a file).
    Thread-safe when ``client`` is: calls are appended in the order they finish.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, client: Any, path: PathLike) -> None:
        self.client: ModelClient = as_model_client(client)
        self.path = os.fspath(path)
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"Recorder: path must be a file path, got {path!r}")
        self.interactions: List[Dict[str, Any]] = []
        self._previous: Optional[List[Any]] = None  # the last request's messages, in full
        self._redact = Redactor.for_client(client)
        self._lock = threading.Lock()

    @property
    def provider_name(self) -> Optional[str]:
        """The wrapped client's (traces name the real provider)."""
        return getattr(self.client, "provider_name", None)

    def create(self, request: ModelRequest) -> ReplyDict:
        events: List[Dict[str, Any]] = []
        sent = request
        if request.on_event is not None:
            target = request.on_event

            def on_event(event: Dict[str, Any]) -> None:
                events.append(copy_json(event))
                target(event)

            sent = dataclasses.replace(request, on_event=on_event)
        record: Dict[str, Any] = {"request": request_record(request)}
        try:
            reply = self.client.create(sent)
        except Exception as exc:
            record.update(events=events, error=error_record(exc))
            self._append(record)
            raise
        record.update(events=events, reply=reply)
        self._append(record)
        return reply

    def count_tokens(self, request: ModelRequest) -> int:
        """The wrapped client's count, recorded too (a replay answers it)."""
        counter: Optional[Callable[[ModelRequest], int]] = getattr(
            self.client, "count_tokens", None)
        if counter is None:
            raise NotImplementedError(f"{type(self.client).__name__} has no count_tokens")
        count = counter(request)
        self._append({"count_tokens": request_record(request), "input_tokens": count})
        return count

    def _append(self, record: Dict[str, Any]) -> None:
        clean = self._redact(json.loads(json.dumps(record, default=repr)))
        with self._lock:
            request = clean.get("request")
            if request is not None:  # kept after the previous request's messages
                messages = request["messages"]
                request["messages"] = shorten(messages, self._previous)
                self._previous = messages
            self.interactions.append(clean)
            _write(self.path, {"format": FORMAT, "version": VERSION,
                               "provider": self.provider_name,
                               "interactions": self.interactions})

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if callable(close):
            close()

    def __repr__(self) -> str:
        return f"Recorder({self.client!r}, {self.path!r})"


class Replayer:
    """A model client answering from the cassette at ``path``, in order.

    Args:
        path: a cassette written by ``Recorder``.
        match: ``"body"`` (default): each request must match the recorded one (model,
            system, messages, tools, max_tokens, output format), else ``AssertionError``
            with a diff; ``"none"``: answer in order without looking.

    ``.index`` is how many interactions were used; running out is an ``AssertionError``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, path: PathLike, *, match: str = "body") -> None:
        if match not in ("body", "none"):
            raise ValueError(f"Replayer: match must be 'body' or 'none', got {match!r}")
        self.path = os.fspath(path)
        self.match = match
        data = load(self.path)
        self.interactions: List[Dict[str, Any]] = data["interactions"]
        # the recorded client's, for traces (gen_ai.provider.name)
        self.provider_name: Optional[str] = data.get("provider")
        self.index = 0
        self._redact = Redactor()
        self._lock = threading.Lock()

    def create(self, request: ModelRequest) -> ReplyDict:
        record = self._next("request", request)
        on_event = request.on_event
        if on_event is not None:
            for event in record.get("events") or ():
                on_event(copy_json(event))
        if "error" in record:
            raise error_from_record(record["error"])
        return copy_json(record["reply"])  # type: ignore[no-any-return]

    def count_tokens(self, request: ModelRequest) -> int:
        return int(self._next("count_tokens", request)["input_tokens"])

    def _next(self, kind: str, request: ModelRequest) -> Dict[str, Any]:
        with self._lock:
            number = self.index
            if number >= len(self.interactions):
                raise AssertionError(
                    f"cassette {self.path!r} has {len(self.interactions)} interactions; "
                    f"call {number + 1} ({kind}) has none to replay. Record the cassette "
                    "again if the agent now makes more calls.")
            record = self.interactions[number]
            self.index += 1
        if kind not in record:
            other = "a count_tokens call" if kind == "request" else "a model request"
            raise AssertionError(f"cassette {self.path!r}, call {number + 1}: recorded "
                                 f"{other}, this run made a {kind} call")
        if self.match == "body":
            recorded = comparable(record[kind])
            if recorded == comparable_of(request):
                return record  # the common case, compared at C speed: no copy, no walk
            actual = comparable(self._redact(request_record(request)))
            if recorded != actual:
                raise AssertionError(
                    f"cassette {self.path!r}, call {number + 1}: the request differs from "
                    f"the recorded one (- recorded, + this run):\n{diff(recorded, actual)}")
        return record

    def close(self) -> None:
        """Nothing to close (a client's lifetime, for symmetry)."""

    def __repr__(self) -> str:
        return f"Replayer({self.path!r}, {self.index}/{len(self.interactions)} used)"


def _write(path: str, data: Dict[str, Any]) -> None:
    """Write ``data`` as indented JSON to ``path`` via a temporary file and a rename."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".cassette-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=1, ensure_ascii=False)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
