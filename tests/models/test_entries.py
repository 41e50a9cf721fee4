"""Each history entry's request bytes, encoded once (``lattice.models.entries``, issue 28).

The joined body must be byte for byte what encoding the whole request gives, for every
codec (Messages, and so Bedrock and Vertex; Chat Completions; Responses): over the
recorded traffic in ../shared and over random conversations that grow turn by turn, get
cache marks on a copy of their last message, go through a hook's private copy, are
compacted or replaced, shrink, share one client with another conversation, or carry an
``extra`` that replaces the message list.
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
from helpers import NO_SHARED, SHARED

from lattice.messages import copy_json
from lattice.models import entries as entries_module
from lattice.models.base import ModelRequest
from lattice.models.chat_wire import Translations, chat_body
from lattice.models.entries import MARK, EntryBytes
from lattice.models.responses_wire import responses_body
from lattice.models.wire import dump_body, request_body, request_dict
from lattice.query.caching import mark_cache_breakpoints

Body = Callable[[ModelRequest, Optional[EntryBytes]], bytes]


def _messages_body(request: ModelRequest, entries: Optional[EntryBytes]) -> bytes:
    return request_body(request, stream=True, entries=entries)[0]


def _bedrock_body(request: ModelRequest, entries: Optional[EntryBytes]) -> bytes:
    body = request_dict(request, stream=False)  # as AnthropicBedrockClient edits it
    body.pop("model", None)
    body.setdefault("anthropic_version", "bedrock-2023-05-31")
    return dump_body(body, entries)


def _chat_body(request: ModelRequest, entries: Optional[EntryBytes]) -> bytes:
    cache = Translations() if entries is not None else None
    return chat_body(request, stream=True, max_tokens_field="max_tokens", cache=cache,
                     entries=entries)[0]


def _responses_body(request: ModelRequest, entries: Optional[EntryBytes]) -> bytes:
    return responses_body(request, stream=True, store=False, entries=entries)[0]


CODECS: Dict[str, Body] = {"messages": _messages_body, "bedrock": _bedrock_body,
                           "chat": _chat_body, "responses": _responses_body}


def _same(codec: Body, request: ModelRequest, entries: EntryBytes) -> bool:
    """The joined body is the plain one (or both raise the same error); True if sent."""
    try:
        plain = codec(request, None)
    except ValueError as exc:  # e.g. a block Chat Completions cannot carry
        with pytest.raises(ValueError) as raised:
            codec(request, entries)
        assert str(raised.value) == str(exc)
        return False
    assert codec(request, entries) == plain
    return True


# -- recorded traffic ------------------------------------------------------------------------
def _recorded_requests() -> Iterator[Dict[str, Any]]:
    root = SHARED / "data" / "recorded-anthropic-traffic"
    for path in sorted(root.rglob("*.json")):
        try:
            loaded = json.loads(path.read_text("utf-8"))
        except ValueError:
            continue
        yield from _bodies(loaded)
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is optional: the JSON recordings only
        return
    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    for path in sorted(root.rglob("*.yaml")):
        yield from _bodies(yaml.load(path.read_text("utf-8"), Loader=loader))


def _bodies(value: Any) -> Iterator[Dict[str, Any]]:
    """Every dict holding a Messages request body (``model`` and a ``messages`` list),
    and request bodies stored as JSON text, anywhere in ``value``."""
    if isinstance(value, dict):
        if isinstance(value.get("messages"), list) and isinstance(value.get("model"), str):
            yield value
            return
        for item in value.values():
            yield from _bodies(item)
    elif isinstance(value, list):
        for item in value:
            yield from _bodies(item)
    elif isinstance(value, str) and value.startswith("{") and '"messages"' in value:
        try:
            yield from _bodies(json.loads(value))
        except ValueError:
            pass


def _request(body: Dict[str, Any], messages: List[Any]) -> ModelRequest:
    known = {"model", "system", "messages", "tools", "max_tokens", "stream"}
    return ModelRequest(model=body["model"], system=body.get("system"), messages=messages,
                        tools=list(body.get("tools") or []),
                        max_tokens=body.get("max_tokens") or 1024,
                        extra={k: v for k, v in body.items() if k not in known})


@pytest.mark.skipif(not (SHARED / "data").is_dir(), reason=NO_SHARED)
@pytest.mark.parametrize("codec", sorted(CODECS))
def test_recorded_conversations_turn_by_turn(codec: str) -> None:
    bodies = list(_recorded_requests())
    assert len(bodies) >= 20, "the recorded traffic holds request bodies"
    encode, entries, turns = CODECS[codec], EntryBytes(), 0
    for body in bodies:
        history = list(body["messages"])
        for end in range(1, len(history) + 1):  # the conversation as it grew
            turns += _same(encode, _request(body, history[:end]), entries)
    assert turns >= 40


# -- random conversations --------------------------------------------------------------------
def _text(rng: random.Random) -> str:
    return rng.choice(["hi", "", "naïve ☃ \u2028 \"quoted\" \\ slash", "x" * rng.randint(0, 50),
                       "</script>", "\x00nul", "emoji 🎉", MARK[:10]])


def _user(rng: random.Random, ids: List[str]) -> Dict[str, Any]:
    if ids and rng.random() < 0.7:
        blocks: List[Dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": i, "content": _text(rng),
             **({"is_error": True} if rng.random() < 0.2 else {})} for i in ids]
        if rng.random() < 0.3:
            blocks[-1]["content"] = [{"type": "text", "text": _text(rng),
                                      "cache_control": {"type": "ephemeral"}}]
        ids.clear()
        return {"role": "user", "content": blocks}
    ids.clear()
    if rng.random() < 0.4:
        return {"role": "user", "content": _text(rng) or "?"}
    return {"role": "user", "content": [
        {"type": "text", "text": _text(rng) or "?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}}][: rng.randint(1, 2)]}


def _assistant(rng: random.Random, ids: List[str], n: int) -> Dict[str, Any]:
    blocks: List[Dict[str, Any]] = []
    if rng.random() < 0.3:
        blocks.append({"type": "thinking", "thinking": _text(rng), "signature": "sig"})
    if rng.random() < 0.7:
        blocks.append({"type": "text", "text": _text(rng) or "ok"})
    for k in range(rng.choice([0, 1, 1, 2])):
        ids.append(f"toolu_{n}_{k}")
        blocks.append({"type": "tool_use", "id": ids[-1], "name": "step",
                       "input": {"n": n, "f": 1.5, "deep": [{"a": [None, True]}]}})
    message: Dict[str, Any] = {"role": "assistant", "content": blocks or
                               [{"type": "text", "text": "ok"}]}
    if rng.random() < 0.15:
        message["openai_items"] = [{"type": "reasoning", "id": f"rs_{n}", "summary": [],
                                    "encrypted_content": "enc"}]
    return message


def _step(rng: random.Random, history: List[Dict[str, Any]], ids: List[str]) -> None:
    if history and history[-1]["role"] == "user":
        history.append(_assistant(rng, ids, len(history)))
    else:
        history.append(_user(rng, ids))


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("seed", range(6))
def test_random_conversations(codec: str, seed: int) -> None:
    rng, encode, entries = random.Random(seed), CODECS[codec], EntryBytes()
    system: Any = rng.choice([None, "Be brief.", [{"type": "text", "text": "sys",
                                                    "cache_control": {"type": "ephemeral"}}]])
    tools = [{"name": "step", "description": "d", "input_schema": {"type": "object"}}]
    history: List[Dict[str, Any]] = []
    other: List[Dict[str, Any]] = []  # a second conversation on the same client
    ids: List[str] = []
    seen = set()
    for _ in range(120):
        _step(rng, history, ids)
        request = ModelRequest(model="m", system=system, messages=list(history), tools=tools)
        what = rng.random()
        if what < 0.2:  # prompt caching: the last message becomes a marked copy
            mark_cache_breakpoints(request)
            seen.add("marked")
        elif what < 0.3:  # a hook's private copy, edited
            request.messages = copy_json(request.messages)
            if request.messages:
                request.messages[-1]["content"] = "edited by a hook"
            seen.add("hook")
        elif what < 0.35 and len(history) > 4:  # compaction: a new list of new dicts
            history[:] = [{"role": "user", "content": "summary"}, *copy_json(history[-3:])]
            request.messages = list(history)
            seen.add("compacted")
        elif what < 0.4:  # the other conversation takes a turn on the same client
            _step(rng, other, [])
            _same(encode, ModelRequest(model="m", messages=list(other)), entries)
            seen.add("other")
        elif what < 0.43 and len(history) > 2:  # fewer messages than last time
            request.messages = list(history[:-2])
            seen.add("shorter")
        elif what < 0.45:
            request.extra = {"messages": [], "input": []}  # extra wins over our list
            seen.add("extra")
        _same(encode, request, entries)
    assert {"marked", "hook", "other", "shorter"} <= seen


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_marker_text_in_the_body_falls_back(codec: str) -> None:
    history = [{"role": "user", "content": "hi"}]
    request = ModelRequest(model="m", system=MARK, messages=history,
                           tools=[{"name": MARK, "description": MARK, "input_schema": {}}])
    _same(CODECS[codec], request, EntryBytes())


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_old_entries_are_not_encoded_again(codec: str, monkeypatch: Any) -> None:
    encoded: List[int] = []
    dump_items = entries_module.dump_items

    def counting(items: Any) -> bytes:
        encoded.append(len(items))
        return dump_items(items)

    monkeypatch.setattr(entries_module, "dump_items", counting)
    rng, entries = random.Random(1), EntryBytes()
    history: List[Dict[str, Any]] = []
    ids: List[str] = []
    for turn in range(60):
        _step(rng, history, ids)
        before = len(encoded)
        request = ModelRequest(model="m", system="s", messages=list(history))
        if turn % 2:
            mark_cache_breakpoints(request)  # the last one a copy: it alone is new
        _same(CODECS[codec], request, entries)
        # at most: the lead (Chat's system message), the new message, the one before it
        # (last turn's marked copy, now sent as itself), this turn's marked copy; never
        # the older entries (up to 60 by the end)
        assert len(encoded) - before <= 4, (turn, len(encoded) - before)


# -- through an Agent: the bodies a real client sends ------------------------------------
class _Checked:
    """Makes a client check, on every request, that the body it sends (joined from its
    cached entries) is the body encoded whole, and count the requests."""

    def __init__(self, client: Any, plain: Callable[[ModelRequest], bytes]) -> None:
        self.client, self.plain, self.sent = client, plain, 0
        body = client._body

        def checked(request: ModelRequest) -> Any:
            data, stream = body(request)
            assert data == self.plain(request)
            self.sent += 1
            return data, stream

        client._body = checked


def test_agent_bodies_with_hooks_marks_compaction_and_replace_history() -> None:
    from helpers import echo_tool, reply, tool_use

    from lattice import Agent, AnthropicClient, AutoCompact
    from lattice.testing import MockMessagesServer

    steps = [reply(tool_use("echo", {"text": f"step {i}"}, id=f"t{i}")) for i in range(5)]
    steps += ["done", "again done"] + ["ok"] * 20  # then answers and compaction summaries
    edits = []

    def hook(request: ModelRequest) -> None:  # edits its private copy in place
        for message in request.messages:  # (its own dicts: a copy, down to the blocks)
            if isinstance(message["content"], str):
                message["content"] += f" (edited {len(edits)})"
        edits.append(1)

    with MockMessagesServer(steps) as server:
        client = AnthropicClient(api_key="k", base_url=server.base_url, stream=False)
        checked = _Checked(client, lambda r: request_body(r, stream=False)[0])
        agent = Agent(model="m", model_client=client, tools=[echo_tool()], system="terse",
                      prompt_caching=True)
        assert agent.prompt("go").subtype == "success"  # marks on copies, turn by turn
        history = agent.get_history()
        agent.replace_history(history[:1] + history[-1:])  # new dicts: encoded afresh
        assert agent.prompt("again").subtype == "success"
        other = Agent(model="m", model_client=client, tools=[echo_tool()], system="terse",
                      on_model_request=hook,
                      auto_compact=AutoCompact(threshold_tokens=1, keep_recent_messages=2))
        other.replace_history(history)  # the same client, another conversation
        for prompt in ("once more", "and again", "and once more"):
            assert other.prompt(prompt).subtype == "success"
        client.close()
    assert checked.sent >= 10 and edits
    seen = [json.loads(r["body"]) if isinstance(r, dict) and "body" in r else r
            for r in server.requests]
    assert any("edited" in json.dumps(body) for body in seen)  # the hook's edit was sent
