"""The one helpers module of the test suite: message builders, fake agents, history checks.

Tests import from here (``from helpers import reply, tool_use``); conftest.py keeps only
fixtures. Only the public API named in SPEC.md is used, as an outside tester would.
"""

import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from lattice import AbortController, Agent, Tool, tool
from lattice.testing import FunctionModelClient, ScriptedModelClient, assert_well_formed

# ../shared beside the repository; LATTICE_SHARED overrides it (e.g. from a git worktree).
SHARED = Path(os.environ.get("LATTICE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
# Why tests reading it skip without it, and how to give it to them.
NO_SHARED = (f"the project's shared data is not at {SHARED}/data (put the shared/ folder beside "
             "this checkout, or point LATTICE_SHARED at it)")
ROOT = Path(__file__).resolve().parents[1]
MODEL = "test-model"

# -- Anthropic-shaped messages --------------------------------------------------------------


def tool_use(name, input=None, id=None):
    """A tool_use block."""
    return {"type": "tool_use", "id": id or f"toolu_{name}", "name": name,
            "input": {} if input is None else input}


def reply(*blocks, stop_reason=None, usage=None, **extra):
    """An assistant reply dict; strings become text blocks.

    ``stop_reason`` defaults to ``tool_use`` when a block is one, else ``end_turn``.
    """
    content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
    out = {"role": "assistant", "content": content}
    if stop_reason is None:
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) \
            else "end_turn"
    out["stop_reason"] = stop_reason
    if usage is not None:
        out["usage"] = usage
    out.update(extra)
    return out


def text_of(content):
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content
                   if isinstance(b, dict) and b.get("type") == "text")


def results_of(message):
    """The tool_result blocks of a history dict (or a UserMessage)."""
    message = getattr(message, "message", message)
    content = message["content"]
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block):
    """The text of a tool_result block's content (str or text blocks)."""
    return text_of(block.get("content", ""))


def json_copy(value):
    """``value`` through JSON and back: fails unless it is JSON-serialisable."""
    return json.loads(json.dumps(value))


# -- agents over the test doubles -----------------------------------------------------------


def scripted(replies, **options):
    client = ScriptedModelClient(replies)
    return Agent(model=MODEL, model_client=client, **options), client


def function_agent(fn, **options):
    client = FunctionModelClient(fn)
    return Agent(model=MODEL, model_client=client, **options), client


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: What to look up.
    """
    return f"value of {key}"


def lookup_call(body):
    """A ``MockMessagesServer`` reply to ``body``: some text and one ``lookup`` call (its id
    made from the request's length, so each turn's differs)."""
    return {"content": [{"type": "text", "text": "checking"},
                        {"type": "tool_use", "id": f"toolu_{len(body['messages'])}",
                         "name": "lookup", "input": {"key": "k"}}]}


def assert_abort_mid_stream(model_client, model=MODEL):
    """``model_client``'s server hangs after a few stream events: an abort at the first
    event ends the query at once (``error_abort``), nothing of the reply kept."""
    agent = Agent(model=model, model_client=model_client, include_partial_messages=True)
    controller = AbortController()
    started = time.monotonic()
    seen = []
    for message in agent.query("x", signal=controller.signal):
        seen.append(message)
        if message.type == "stream_event":
            controller.abort()  # events arrived: the stream is open and hanging
    assert any(m.type == "stream_event" for m in seen)
    assert seen[-1].subtype == "error_abort" and time.monotonic() - started < 5
    assert [m["role"] for m in agent.get_history()] == ["user"]


def assert_timeout_mid_stream(model_client, model=MODEL):
    """As ``assert_abort_mid_stream``, ended by a 300 ms request timeout instead."""
    agent = Agent(model=model, model_client=model_client, request_timeout_ms=300)
    started = time.monotonic()
    assert agent.prompt("x").subtype == "error_timeout" and time.monotonic() - started < 5
    assert [m["role"] for m in agent.get_history()] == ["user"]


def echo_tool(name="echo", **kw):
    return Tool(name, "Echo.", {"type": "object"}, lambda a: f"{name} ran", **kw)


def run(agent, prompt="hi", **query_options):
    return list(agent.query(prompt, **query_options))


# -- threads --------------------------------------------------------------------------------


class Gates:
    """Events that block a fake client/tool; all released when the test ends."""

    def __init__(self):
        self._events = []

    def new(self):
        event = threading.Event()
        self._events.append(event)
        return event

    def release_all(self):
        for event in self._events:
            event.set()


def in_thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


# -- clients and tools that ignore cancellation (released at teardown by ``gates``) ---------

LONG = 10  # seconds a misbehaving client/tool would block (released at teardown)
QUICK = 1.0  # "within about 100 ms", with a wide margin
WAIT_S = 10.0  # how long a test waits for something that takes milliseconds


def blocking_client(gates, then=lambda r: reply("late reply")):
    """A client that ignores signal and timeout: blocks until released (or LONG)."""
    entered, release = gates.new(), gates.new()
    requests = []

    def fn(request):
        requests.append(request)
        entered.set()
        release.wait(LONG)
        out = then(request)
        requests.append("returned")
        return out

    return fn, entered, release, requests


FOREVER = 30  # a hung client/tool sleeps this long; tests must finish far sooner


def hung_client(started=None):
    """A model client that ignores cancellation: it sleeps FOREVER (after ``started``)."""

    def fn(request):
        if started is not None:
            started.set()
        time.sleep(FOREVER)
        return "too late"

    return fn


def waiting_tool(started: threading.Event, release: threading.Event) -> Tool:
    """Tool ``slow``: sets ``started``, then waits for ``release`` (at most WAIT_S)."""

    def handler(args: Any) -> str:
        started.set()
        release.wait(WAIT_S)
        return "tool done"

    return Tool("slow", "A slow tool.", {"type": "object"}, handler)


def blocking_tool(gates, name="hang", result="tool done"):
    entered, release = gates.new(), gates.new()
    calls = []

    def handler(_input, context):
        calls.append(context)
        entered.set()
        release.wait(LONG)
        return result

    return Tool(name, "Blocks.", {"type": "object"}, handler), entered, release, calls


def trigger_when(event, action):
    """In a thread: wait for ``event``, note the time, run ``action``."""
    box = {}

    def go():
        assert event.wait(LONG)
        box["t"] = time.monotonic()
        action()

    box["thread"] = in_thread(go)
    return box


def read_log(path):
    """The JSON lines of an event log written by child processes (none if it does not
    exist yet); a line cut by kill -9 is skipped."""
    events = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by kill -9
    return events


def lattice_threads():
    return [t for t in threading.enumerate()
            if t.name.startswith(("lattice-query", "lattice-tool"))]


def join_lattice_threads(before, timeout=10.0):
    """Wait for the query workers and tool threads the test started, those not in
    ``before`` (``set(lattice_threads())`` taken before it started them), to end; fail
    after ``timeout`` in all. Threads another test left running are never waited for."""
    deadline = time.monotonic() + timeout
    mine = [t for t in lattice_threads() if t not in before]
    for thread in mine:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in mine if t.is_alive()]
    assert not alive, f"threads still running: {alive}"


# -- OpenAI Chat Completions wire (models/test_openai.py, models/test_chat_stream.py) ------------

OPENAI_BASE = "https://api.openai.com/v1"
OPENAI_URL = OPENAI_BASE + "/chat/completions"
OPENAI_KEY = "sk-proj-test-0123456789abcdef"


def chat_client(**kwargs: Any):
    from lattice.models.openai import OpenAIChatClient
    from lattice.models.retry import RetryPolicy

    sleeps: list = []
    kwargs.setdefault("retry_policy", RetryPolicy(max_retries=kwargs.pop("max_retries", 2),
                                                  sleep=sleeps.append, random=lambda: 0.0))
    kwargs.setdefault("stream", False)
    return OpenAIChatClient(kwargs.pop("api_key", OPENAI_KEY), **kwargs)


def chat_request(**kwargs: Any):
    from lattice.models.base import ModelRequest

    kwargs.setdefault("model", "gpt-test")
    kwargs.setdefault("messages", [{"role": "user", "content": "Hello"}])
    return ModelRequest(**kwargs)


def chat_sent(index: int = 0) -> Dict[str, Any]:
    import responses

    return json.loads(responses.calls[index].request.body)  # type: ignore[no-any-return]


def chat_sse(*chunks: Any, done: bool = True) -> str:
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    return "".join(lines) + ("data: [DONE]\n\n" if done else "")


def chat_chunk(delta: Dict[str, Any], finish: Optional[str] = None, **extra: Any) -> Dict[str, Any]:
    return dict({"id": "chatcmpl-s", "object": "chat.completion.chunk", "model": "gpt-s",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}, **extra)


def chat_stream_reply(body: str, **kwargs: Any) -> Dict[str, Any]:
    import responses

    responses.add(responses.POST, OPENAI_URL, body=body, content_type="text/event-stream")
    return chat_client(stream=True).create(chat_request(**kwargs))


# -- AnthropicClient over mocked HTTP (models/test_anthropic.py, models/test_retry.py) -------------

ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
ANTHROPIC_MESSAGE = {
    "id": "msg_01abc", "type": "message", "role": "assistant", "model": "claude-served",
    "content": [{"type": "text", "text": "Hi!"}], "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 4,
              "cache_read_input_tokens": 5, "service_tier": "standard"},
}
ANTHROPIC_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")


class FakeTime:
    """A clock that only moves when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: List[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def anthropic_client(fake: Optional[FakeTime] = None, **kwargs: Any):
    """An AnthropicClient retrying on ``fake``'s clock (no real sleeps), not streaming."""
    from lattice.models.anthropic import AnthropicClient
    from lattice.models.retry import RetryPolicy

    fake = fake or FakeTime()
    retries = kwargs.pop("max_retries", 2)
    policy = RetryPolicy(max_retries=retries, sleep=fake.sleep, clock=fake.clock,
                         random=lambda: 0.0)
    kwargs.setdefault("stream", False)
    return AnthropicClient(ANTHROPIC_KEY, retry_policy=policy, **kwargs)


def anthropic_request(**kwargs: Any):
    from lattice.models.base import ModelRequest

    kwargs.setdefault("model", "claude-test")
    kwargs.setdefault("messages", [{"role": "user", "content": "Hello"}])
    return ModelRequest(**kwargs)


def anthropic_error_body(kind: str, message: str,
                         request_id: Optional[str] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    if request_id:
        body["request_id"] = request_id
    return body


# -- interrupts and the agent's guard (test_reliability*.py) --------------------------------


class Fatal(BaseException):
    """Not an Exception: what a tool or client calling sys.exit() looks like."""


@contextmanager
def on_call(function: Callable[..., Any], action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` when ``function`` is next called in this thread: an exception it
    raises is raised at that call, the way a Ctrl-C landing there would be."""
    code = function.__code__
    pending = [True]

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and pending[0]:
            pending[0] = False
            action()

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)
    assert not pending[0], f"{function.__qualname__} was not called"


def keyboard_interrupt() -> None:
    raise KeyboardInterrupt


def tool_then_text(text: str = "fine") -> ScriptedModelClient:
    return ScriptedModelClient([reply(tool_use("slow", {}, "t1")), text, text, text])


def assert_usable(agent: Agent, expected: str = "fine") -> None:
    """The guard is free and the conversation continues."""
    assert agent._conversation.race is None
    assert_well_formed(agent.get_history())
    result = agent.prompt("and now?")
    assert result.subtype == "success" and result.result == expected
    assert_well_formed(agent.get_history())


# -- history messages for compaction's surgery (test_compaction*.py) ------------------------

Msg = Dict[str, Any]


def user(content: Any) -> Msg:
    return {"role": "user", "content": content}


def text_reply(text: str, **extra: Any) -> Msg:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], **extra}


def call(tool_id: str, name: str = "read", **input: Any) -> Dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": input}


def calls(*ids: str) -> Msg:
    return {"role": "assistant", "content": [call(i) for i in ids]}


def results(*ids: str, content: Any = "ok") -> Msg:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": i, "content": content} for i in ids]}


def thinking(text: str = "hmm") -> Dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": "sig=="}


# -- lattice.schema (test_schema_*.py) ------------------------------------------------------


def errors_of(instance: Any, schema_: Any, **options: Any) -> List[str]:
    """The messages of the ValidationError ``schema.validate`` raises (it must raise)."""
    import pytest

    from lattice import schema
    from lattice.schema import ValidationError

    with pytest.raises(ValidationError) as info:
        schema.validate(instance, schema_, **options)
    return [str(e) for e in info.value.errors]


# -- compaction: a model that answers summary requests (test_compaction_*.py) -------------

COMPACT_MARK = "SUMMARISE-THE-TRANSCRIPT-MARKER"
SUMMARY = "SUMMARY-TEXT-42"
SUMMARY_USAGE = {"input_tokens": 7, "output_tokens": 3}
BIG = {"input_tokens": 500, "output_tokens": 1}
SMALL = {"input_tokens": 5, "output_tokens": 1}


def is_summary(request, marker=COMPACT_MARK):
    last = request.messages[-1] if request.messages else {}
    return marker in json.dumps(request.system) or marker in json.dumps(last)


class SummaryModel:
    """Normal replies from a script; summary requests answered with SUMMARY."""

    def __init__(self, *replies, summary=None, marker=COMPACT_MARK):
        self.replies = list(replies)
        self.summary = summary
        self.marker = marker
        self.normal, self.summaries = [], []

    def __call__(self, request):
        if is_summary(request, self.marker):
            self.summaries.append(request)
            if isinstance(self.summary, BaseException):
                raise self.summary
            return reply(SUMMARY, usage=SUMMARY_USAGE)
        self.normal.append(request)
        item = self.replies.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


# -- compaction inside a tool loop: summaries recognised by their transcript ---------------

LOOP_BIG = {"input_tokens": 900, "output_tokens": 10}
LOOP_SMALL = {"input_tokens": 50, "output_tokens": 10}
LOOP_SUMMARY_USAGE = {"input_tokens": 300, "output_tokens": 40}


def loop_is_summary(request):
    return request.tools == [] and "<transcript>" in str(request.messages[-1]["content"])


class LoopModel:
    """Answers summary requests with a summary, others from a script."""

    def __init__(self, script, summary="SUMMARY OF EARLIER WORK", fail_summary=None):
        self.script = list(script)
        self.summary = summary
        self.fail_summary = fail_summary
        self.requests = []
        self.summaries = []

    def __call__(self, request):
        self.requests.append(request)
        if loop_is_summary(request):
            self.summaries.append(request)
            if self.fail_summary is not None:
                raise self.fail_summary
            return reply(self.summary, usage=LOOP_SUMMARY_USAGE)
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def loop_turn(i, usage=LOOP_SMALL):
    return reply(f"working {i}", tool_use("echo", {}, f"t{i}"), usage=usage)


def loop_agent(model, **options):
    from lattice import Agent, AutoCompact, Tool
    from lattice.testing import FunctionModelClient

    options.setdefault("auto_compact", AutoCompact(threshold_tokens=500, keep_recent_messages=2))
    echo = Tool("echo", "Echo.", {"type": "object"}, lambda a: "echoed")
    return Agent(model="m", model_client=FunctionModelClient(model), tools=[echo], **options)


def compact_agent(model, store=None, **compact):
    """An Agent compacting at 100 tokens with COMPACT_MARK as its prompt; returns it and
    the list of what the store was given to ``replace``."""
    from lattice import Agent, AutoCompact, define_history_store
    from lattice.testing import FunctionModelClient

    settings = {"threshold_tokens": 100, "keep_recent_messages": 2, "prompt": COMPACT_MARK}
    settings.update(compact)
    replaced = []
    if store is None:
        store = define_history_store(replace=lambda m: replaced.append(json.loads(json.dumps(m))))
    agent = Agent(model=MODEL, model_client=FunctionModelClient(model),
                  auto_compact=AutoCompact(**settings), history_store=store)
    return agent, replaced
