"""query() and prompt() with a model client that can be aborted from another thread
(``abortable``, #39): the loop runs on the caller's thread; the tool batches go to another
(one hand-off a tool turn) when a signal could end the query during one, else they run
there too (no hand-off). SPEC 5's abort and lockstep promises hold as with the worker, and
every other query keeps its worker."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

import pytest
from helpers import QUICK, WAIT_S, in_thread, reply, tool_use

from lattice import AbortController, Agent, AnthropicClient, Tool
from lattice.models.base import ModelRequest
from lattice.testing import FunctionModelClient, assert_well_formed

STEPS = 3


class Abortable:
    """A model client that says it can be aborted: it waits on its request's signal."""

    abortable = True

    def __init__(self, turns: int = STEPS, hang_at: int = -1) -> None:
        self.turns = turns
        self.hang_at = hang_at
        self.threads: List[threading.Thread] = []
        self.entered = threading.Event()

    def create(self, request: ModelRequest) -> Dict[str, Any]:
        self.threads.append(threading.current_thread())
        k = (len(request.messages) + 1) // 2
        if k == self.hang_at:
            self.entered.set()
            request.signal.wait(WAIT_S)  # returns at the abort (the promise it made)
            request.signal.throw_if_aborted()
        if k >= self.turns:
            return reply({"type": "text", "text": "done"})
        return reply(tool_use("step", {"n": k}, id=f"t{k}"))


def step_tool(seen: List[threading.Thread], **kw: Any) -> Tool:
    def handler(args: Any) -> str:
        seen.append(threading.current_thread())
        return "ok"

    return Tool("step", "A step.", {"type": "object"}, handler, **kw)


def in_a_thread(fn: Any) -> Any:
    """``fn()`` on a thread that is not the main one (where queries run inline)."""
    box: Dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: B036 - re-raised on the test's thread
            box["error"] = exc

    thread = in_thread(go)
    thread.join(WAIT_S * 2)
    assert not thread.is_alive()
    if "error" in box:
        raise box["error"]
    return box["value"], thread


def test_with_a_signal_model_calls_run_on_the_consumers_thread_and_tools_on_one_other():
    client, tools_seen = Abortable(), []
    agent = Agent(model="m", model_client=client, tools=[step_tool(tools_seen)])
    signal = AbortController().signal
    messages, consumer = in_a_thread(lambda: list(agent.query("go", signal=signal)))
    assert messages[-1].subtype == "success" and messages[-1].num_turns == STEPS
    assert client.threads == [consumer] * STEPS  # no worker for the model calls
    assert len(tools_seen) == STEPS - 1 and len(set(tools_seen)) == 1  # one tool thread
    assert tools_seen[0] is not consumer
    assert_well_formed(agent.get_history())
    # the same messages as a query with its worker (the client not saying it)
    worker = Agent(model="m", model_client=Abortable().create, tools=[step_tool([])])
    expected, _ = in_a_thread(lambda: list(worker.query("go")))
    assert [type(m).__name__ for m in messages] == [type(m).__name__ for m in expected]
    assert agent.get_history() == worker.get_history()


@pytest.mark.parametrize("ask", ["query", "prompt"])
def test_without_a_signal_the_tools_run_on_the_callers_thread_too(ask):
    """Nothing can end the query during a batch (an interrupt waits for it): no hand-off."""
    client, tools_seen = Abortable(), []
    agent = Agent(model="m", model_client=client, tools=[step_tool(tools_seen)])
    run = (lambda: list(agent.query("go"))) if ask == "query" else (
        lambda: [agent.prompt("go")])
    messages, caller = in_a_thread(run)
    assert messages[-1].subtype == "success" and messages[-1].num_turns == STEPS
    assert client.threads == [caller] * STEPS
    assert tools_seen == [caller] * (STEPS - 1)
    assert_well_formed(agent.get_history())


def test_prompt_with_a_signal_keeps_its_worker():
    """With a signal a batch must run where an abort can leave it: ``prompt()``'s worker
    (one hand-off a query) beats a tool thread (one a tool turn)."""
    client, tools_seen = Abortable(), []
    agent = Agent(model="m", model_client=client, tools=[step_tool(tools_seen)])
    signal = AbortController().signal
    (result,), caller = in_a_thread(lambda: [agent.prompt("go", signal=signal)])
    assert result.subtype == "success" and caller not in client.threads
    assert set(tools_seen) == set(client.threads) and len(set(client.threads)) == 1


def test_an_interrupt_during_an_inline_batch_waits_for_it():
    """No signal, so the batch runs on the consumer's thread: an interrupt from another
    thread lets it finish, its result is kept, and the query ends ``interrupted``."""
    entered, release = threading.Event(), threading.Event()

    def handler(args: Any, context: Any) -> str:
        entered.set()
        assert release.wait(WAIT_S)
        return "kept"

    agent = Agent(model="m", model_client=Abortable(),
                  tools=[Tool("step", "A step.", {"type": "object"}, handler)])

    def interrupt() -> None:
        assert entered.wait(WAIT_S)
        agent.interrupt()
        release.set()

    threading.Thread(target=interrupt, daemon=True).start()
    messages, _ = in_a_thread(lambda: list(agent.query("go")))
    assert messages[-1].subtype == "interrupted"
    history = agent.get_history()
    assert history[-1]["content"][0]["content"] in ("kept", [{"type": "text", "text": "kept"}])
    assert_well_formed(history)


@pytest.mark.parametrize("why", ["no attribute", "main thread", "hook", "store"])
def test_other_queries_keep_their_worker(why, tmp_path):
    client, tools_seen = Abortable(), []
    options: Dict[str, Any] = {}
    if why == "no attribute":
        client.abortable = False  # type: ignore[misc]
    if why == "hook":
        options["on_model_request"] = lambda request: None
    if why == "store":
        from lattice import JsonlHistoryStore

        options["history_store"] = JsonlHistoryStore(tmp_path / "h.jsonl")
    agent = Agent(model="m", model_client=client, tools=[step_tool(tools_seen)], **options)
    if why == "main thread":
        consumer = threading.current_thread()
        messages = list(agent.query("go"))
    else:
        messages, consumer = in_a_thread(lambda: list(agent.query("go")))
    assert messages[-1].subtype == "success"
    assert consumer not in client.threads  # the model calls ran in the worker
    assert set(tools_seen) == set(client.threads)  # ... where the tools ran too


def test_lockstep_holds_on_the_consumers_thread():
    """A batch does not start while the consumer holds the reply, and no request starts
    before it asks for the message after the tool results."""
    log: List[str] = []

    class Logged(Abortable):
        def create(self, request: ModelRequest) -> Dict[str, Any]:
            log.append("request")
            return super().create(request)

    def handler(args: Any) -> str:
        log.append("tool")
        return "ok"

    agent = Agent(model="m", model_client=Logged(turns=2),
                  tools=[Tool("step", "A step.", {"type": "object"}, handler)])

    def consume() -> List[str]:
        for message in agent.query("go"):
            log.append(f"got {type(message).__name__}")
            time.sleep(0.02)  # holding it: nothing may go on meanwhile
            log.append(f"done {type(message).__name__}")
        return log

    got, _ = in_a_thread(consume)
    assert got == ["request", "got AssistantMessage", "done AssistantMessage", "tool",
                   "got UserMessage", "done UserMessage", "request", "got AssistantMessage",
                   "done AssistantMessage", "got ResultMessage", "done ResultMessage"]


def test_abort_during_the_model_call_ends_the_query_at_once():
    client = Abortable(hang_at=1)
    controller = AbortController()
    agent = Agent(model="m", model_client=client, tools=[step_tool([])])
    threading.Thread(target=lambda: (client.entered.wait(WAIT_S), controller.abort()),
                     daemon=True).start()
    started = time.monotonic()
    messages, consumer = in_a_thread(lambda: list(agent.query("go", signal=controller.signal)))
    assert messages[-1].subtype == "error_abort" and time.monotonic() - started < QUICK * 2
    assert client.threads[-1] is consumer
    assert_well_formed(agent.get_history())


def test_abort_during_a_tool_that_never_returns_leaves_it_running():
    started_tool, release = threading.Event(), threading.Event()

    def handler(args: Any) -> str:
        started_tool.set()
        release.wait(WAIT_S)
        return "late"

    controller = AbortController()
    agent = Agent(model="m", model_client=Abortable(),
                  tools=[Tool("step", "Hangs.", {"type": "object"}, handler)])
    box: Dict[str, float] = {}

    def abort() -> None:
        started_tool.wait(WAIT_S)
        box["t"] = time.monotonic()
        controller.abort()

    threading.Thread(target=abort, daemon=True).start()
    try:
        messages, _ = in_a_thread(lambda: list(agent.query("go", signal=controller.signal)))
        assert messages[-1].subtype == "error_abort"
        assert time.monotonic() - box["t"] < QUICK
        history = agent.get_history()
        assert_well_formed(history)
        assert "aborted" in history[-1]["content"][0]["content"]
    finally:
        release.set()


def test_a_request_deadline_ends_the_model_call():
    client = Abortable(hang_at=1)
    agent = Agent(model="m", model_client=client, request_timeout_ms=50)
    started = time.monotonic()
    messages, _ = in_a_thread(lambda: list(agent.query("go")))
    assert messages[-1].subtype == "error_timeout" and time.monotonic() - started < QUICK


def test_a_tool_error_and_a_client_error_end_as_with_the_worker():
    class Failing(Abortable):
        def create(self, request: ModelRequest) -> Dict[str, Any]:
            if len(request.messages) > 2:
                raise RuntimeError("the client broke")
            return super().create(request)

    agent = Agent(model="m", model_client=Failing(), tools=[step_tool([])])
    with pytest.raises(RuntimeError, match="the client broke"):
        in_a_thread(lambda: list(agent.query("go")))
    assert_well_formed(agent.get_history())


def test_the_built_in_http_clients_say_they_can_be_aborted():
    import requests

    assert AnthropicClient("k").abortable is True
    assert AnthropicClient("k", session=requests.Session()).abortable is False
    from lattice import AnthropicVertexClient, AzureOpenAIChatClient

    assert AnthropicVertexClient(project_id="p", region="us-east5",
                                 access_token="t").abortable is True
    azure = AzureOpenAIChatClient(endpoint="https://x.openai.azure.com", deployment="d",
                                  token_provider=lambda: "t", api_version="2024-10-21")
    assert azure.abortable is False  # the provider is code no signal reaches


def test_a_subagent_under_its_parents_signal_keeps_its_tools_where_an_abort_leaves_them():
    """A child query has no signal of its own, but its parent's can end it during a batch:
    its tools go to a thread of their own (run inline, an abort could not leave one that
    hangs), and the parent's abort ends the query at once."""
    entered, release, tool_threads = threading.Event(), threading.Event(), []

    def hang(args: Any) -> str:
        tool_threads.append(threading.current_thread())
        entered.set()
        release.wait(WAIT_S)
        return "late"

    client = Abortable(turns=2)
    child = Agent(model="m", name="helper", model_client=client,
                  tools=[Tool("step", "A step.", {"type": "object"}, hang)])
    parent_threads: List[threading.Thread] = []

    def delegating(request: ModelRequest) -> Dict[str, Any]:
        parent_threads.append(threading.current_thread())  # (it runs the batch too)
        return reply(tool_use("helper", {"prompt": "work"}, id="d1"))

    parent = Agent(model="m", tools=[child.as_tool()],
                   model_client=FunctionModelClient(delegating))
    controller = AbortController()
    threading.Thread(target=lambda: (entered.wait(WAIT_S), controller.abort()),
                     daemon=True).start()
    try:
        started = time.monotonic()
        messages, _ = in_a_thread(lambda: list(parent.query(
            "go", signal=controller.signal)))
        assert messages[-1].subtype == "error_abort"
        assert time.monotonic() - started < WAIT_S / 2  # not after the hanging tool
        # the child's loop runs where the parent's abort can leave it, not inline on the
        # thread that runs the parent's batch
        assert len(client.threads) == 1 and tool_threads
        assert client.threads[0] is not parent_threads[0]
        assert tool_threads[0] is not parent_threads[0]
        assert_well_formed(parent.get_history())
    finally:
        release.set()
