"""Malformed replies are API errors (SPEC 16a), found by mutation.

Every recorded reply in ../shared (Messages and Chat Completions, JSON and SSE, read by
the replay tests' own loaders) is changed one field at a time: each field in turn gets a
value of every other JSON type. Whatever the codec makes of it, the outcome is a reply the
loop can read (``shape.check_reply``) or an ``APIError``: never a bare ``TypeError``,
``AttributeError``, ``KeyError``, ``IndexError`` or ``RecursionError``. Then the named
cases of issue 23, deep nesting, and the test doubles.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Set, Tuple

import pytest
from helpers import SHARED

from lattice.errors import APIConnectionError, APIError
from lattice.models.anthropic import MessagesCodec
from lattice.models.body import DEFAULT_MAX_RESPONSE_BYTES
from lattice.models.openai import ChatCodec
from lattice.models.shape import check_reply
from lattice.testing import FunctionModelClient, ScriptedModelClient

HERE = Path(__file__).resolve().parent
OTHERS: List[Any] = [None, True, 5, 1.5, "x", [1], {"k": 1}]
BARE = (TypeError, AttributeError, KeyError, IndexError, RecursionError, ValueError)
Path_ = Tuple[Any, ...]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_mutation_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def _recorded(name: str) -> List[Any]:
    if not (SHARED / "data").is_dir():
        return []
    return [c for c in _load(name).CASES if hasattr(c, "body") and c.status < 300]


# -- making mutants -------------------------------------------------------------------------


def _paths(value: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, inner in items:
        yield prefix + (key,)
        yield from _paths(inner, prefix + (key,))


def _get(value: Any, path: Path_) -> Any:
    for key in path:
        value = value[key]
    return value


def _mutants(value: Any) -> Iterator[Tuple[Path_, Any]]:
    """``(path, value)`` with the field at ``path`` replaced, in place (restored when the
    next is made: use each mutant before asking for the next), for every field and every
    value of another type."""
    for path in list(_paths(value)):
        parent, key = _get(value, path[:-1]), path[-1]
        original = parent[key]
        for other in OTHERS:
            if type(other) is type(original):
                continue
            parent[key] = other
            yield path, value
        parent[key] = original


def _signature(path: Path_) -> Tuple[Any, ...]:
    return tuple("#" if isinstance(k, int) else k for k in path)


def _sse_events(text: str) -> List[Tuple[str, Any]]:
    events, name = [], "message"
    for line in text.splitlines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            try:
                events.append((name, json.loads(data)))
            except ValueError:  # [DONE], or what a server sends that is not JSON
                events.append((name, data))
    return events


def _render(events: List[Tuple[str, Any]]) -> List[bytes]:
    return [f"event: {n}\ndata: {d if isinstance(d, str) else json.dumps(d)}\n\n".encode()
            for n, d in events]


def _stream_mutants(text: str, seen: Set[Any]) -> Iterator[Tuple[str, bytes]]:
    """Each event's fields mutated in turn, once per kind of event and field."""
    events = _sse_events(text)
    rendered = _render(events)
    for index, (name, data) in enumerate(events):
        if not isinstance(data, dict):
            continue
        delta = data.get("delta")  # Messages: the event and delta type; Chat: neither
        kind = (data.get("type"), delta.get("type") if isinstance(delta, dict) else None)
        around = None
        for path, mutant in _mutants(data):
            key = (kind, _signature(path), _get_other(mutant, path))
            if key in seen:
                continue
            seen.add(key)
            if around is None:  # what came before, and how the stream ends
                around = (b"".join(rendered[:index]),
                          b"".join(rendered[max(index + 1, len(rendered) - 3):]))
            yield (f"event {index} {'.'.join(map(str, path))}",
                   around[0] + _render([(name, mutant)])[0] + around[1])


def _get_other(mutant: Any, path: Path_) -> Any:
    return type(_get(mutant, path)).__name__


def _json_mutants(body: str, seen: Set[Any]) -> Iterator[Tuple[str, bytes]]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return  # a recorded body that is not JSON: nothing to mutate
    for path, mutant in _mutants(parsed):
        key = (_signature(path), _get_other(mutant, path))
        if key not in seen:
            seen.add(key)
            yield ".".join(map(str, path)), json.dumps(mutant).encode()


# -- running them ---------------------------------------------------------------------------


def _outcome(read: Callable[[], Dict[str, Any]]) -> str:
    try:
        reply = read()
    except APIError:
        return "api error"
    check_reply(reply)  # what the codec gave passes the loop's check
    json.dumps(reply)
    return "reply"


def _run(cases: List[Any], read_json: Callable[[bytes], Dict[str, Any]],
         read_stream: Callable[[bytes], Dict[str, Any]]) -> Tuple[int, List[str]]:
    count, bare = 0, []
    seen_json: Set[Any] = set()
    seen_sse: Set[Any] = set()
    for case in cases:
        streamed = "event-stream" in case.content_type
        mutants = _stream_mutants(case.body, seen_sse) if streamed \
            else _json_mutants(case.body, seen_json)
        read = read_stream if streamed else read_json
        for where, data in mutants:
            count += 1
            try:
                _outcome(lambda: read(data))  # noqa: B023 - called at once
            except BARE as exc:
                bare.append(f"{case.name} {where}: {type(exc).__name__}: {exc}")
    return count, bare


@pytest.mark.parametrize("recorded, codec", [
    ("test_recorded_anthropic", MessagesCodec("https://api.anthropic.com")),
    ("test_recorded_openai", ChatCodec("https://api.openai.com/v1",
                                       "https://api.openai.com/v1/chat/completions")),
], ids=["messages", "chat"])
def test_mutated_replies_raise_only_api_errors(recorded: str, codec: Any) -> None:
    cases = _recorded(recorded)
    if not cases:
        pytest.skip("../shared recorded traffic absent")
    count, bare = _run(
        cases, codec.read_json,
        lambda data: codec.read_stream(iter([data]), None, DEFAULT_MAX_RESPONSE_BYTES))
    print(f"{count} mutations")
    assert count > 300, count
    assert bare == [], f"{len(bare)} of {count} mutations: " + "\n".join(bare[:20])


# -- the named cases ------------------------------------------------------------------------

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
           "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
           "usage": {"input_tokens": 1, "output_tokens": 1}}
COMPLETION = {"id": "c1", "object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def _messages_stream(*, start: Any = None, deltas: Any = ()) -> bytes:
    message = dict(MESSAGE, content=[], stop_reason=None) if start is None else start
    events: List[Tuple[str, Any]] = [("message_start", {"type": "message_start",
                                                        "message": message})]
    events += [("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "tool_use", "id": "t",
                                                          "name": "f", "input": {}}})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": d}) for d in deltas]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": "tool_use"}, "usage": {}}),
               ("message_stop", {"type": "message_stop"})]
    return b"".join(_render(events))


@pytest.mark.parametrize("field,value", [("content", 5), ("usage", [1]), ("id", 5),
                                         ("content", [5]), ("content", [{"type": 5}]),
                                         ("content", [{"type": "text", "text": 5}])])
def test_a_wrong_messages_field_is_named(field: str, value: Any) -> None:
    body = json.dumps(dict(MESSAGE, **{field: value})).encode()
    with pytest.raises(APIConnectionError, match=rf"malformed reply: .*{field}"):
        MessagesCodec("https://x").read_json(body)


def test_a_wrong_message_start_is_named() -> None:
    codec = MessagesCodec("https://x")
    with pytest.raises(APIConnectionError, match="message_start.message"):
        codec.read_stream(iter([_messages_stream(start=5)]), None, DEFAULT_MAX_RESPONSE_BYTES)


@pytest.mark.parametrize("where,value", [("choices", 5), ("message", 5), ("content", 5),
                                         ("tool_calls", 5), ("function", "x")])
def test_a_wrong_chat_field_is_named(where: str, value: Any) -> None:
    body = copy.deepcopy(COMPLETION)
    message = body["choices"][0]["message"]
    if where == "choices":
        body["choices"] = value
    elif where == "message":
        body["choices"][0]["message"] = value
    elif where == "function":
        message["tool_calls"] = [{"id": "c", "type": "function", "function": value}]
    else:
        message[where] = value
    with pytest.raises(APIConnectionError, match=rf"malformed reply: .*{where}"):
        ChatCodec("https://x/v1", "https://x/v1/chat/completions").read_json(
            json.dumps(body).encode())


@pytest.mark.parametrize("delta", ["x", 5, [1]])
def test_a_wrong_chat_delta_is_named(delta: Any) -> None:
    chunks = [{"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta}]},
              {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {},
                                                     "finish_reason": "stop"}]}]
    data = b"".join(_render([("message", c) for c in chunks] + [("message", "[DONE]")]))
    with pytest.raises(APIConnectionError, match=r"malformed reply: .*delta"):
        ChatCodec("https://x/v1", "u").read_stream(iter([data]), None, 1 << 20)


# -- nesting --------------------------------------------------------------------------------


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_deep_streamed_tool_input_is_an_api_error() -> None:
    text = _nested(10_000)
    pieces = [{"type": "input_json_delta", "partial_json": text[i:i + 5000]}
              for i in range(0, len(text), 5000)]
    data = _messages_stream(deltas=pieces)
    with pytest.raises(APIConnectionError, match="deeper than 100"):
        MessagesCodec("https://x").read_stream(iter([data]), None, DEFAULT_MAX_RESPONSE_BYTES)


@pytest.mark.parametrize("depth", [101, 900, 10_000])
def test_deep_json_replies_are_api_errors(depth: int) -> None:
    message = json.dumps(dict(MESSAGE, content=[{"type": "tool_use", "id": "t", "name": "f",
                                                 "input": {}}]))
    body = message.replace('"input": {}', '"input": ' + _nested(depth)).encode()
    with pytest.raises(APIConnectionError, match="deeper than 100|nested too deeply"):
        MessagesCodec("https://x").read_json(body)


def test_shallow_enough_is_fine() -> None:
    message = json.dumps(dict(MESSAGE, content=[{"type": "tool_use", "id": "t", "name": "f",
                                                 "input": json.loads(_nested(90))}]))
    assert MessagesCodec("https://x").read_json(message.encode())["content"][0]["name"] == "f"


def _deep_value(depth: int) -> Dict[str, Any]:
    value: Dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("make", [
    lambda reply: ScriptedModelClient([reply]),
    lambda reply: FunctionModelClient(lambda request: reply),
])
def test_test_doubles_refuse_deep_replies(make: Any) -> None:
    from lattice.models.base import ModelRequest

    reply = {"content": [{"type": "tool_use", "id": "t", "name": "f",
                          "input": _deep_value(10_000)}]}
    with pytest.raises(APIConnectionError, match="deeper than 100"):
        make(reply).create(ModelRequest(model="m", messages=[]))


def test_the_id_of_a_message_too_deep_to_parse() -> None:
    from lattice.models.shape import too_deep, top_level_id

    deep = "[" * 50_000 + "]" * 50_000
    assert top_level_id(b'{"result": {"id": 9, "x": "\\"id\\": 8"}, "id": 7, "r": ' +
                        deep.encode() + b"}") == 7
    assert top_level_id(b'{"jsonrpc": "2.0", "id": "a-1", "result": ' + deep.encode()) == "a-1"
    assert top_level_id(b'{"result": [{"id": 3}]}') is None
    assert too_deep(json.loads("[" * 101 + "]" * 101)) and not too_deep([[[]]])
