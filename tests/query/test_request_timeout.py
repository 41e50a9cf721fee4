"""request_timeout_ms (SPEC 5): each model request's deadline, its override per
query, the signal the client gets, and what a late reply or a slow store cannot do."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any, List

import pytest
from helpers import (
    LONG,
    QUICK,
    WAIT_S,
    blocking_client,
    function_agent,
    join_lattice_threads,
    json_copy,
    lattice_threads,
    reply,
    run,
    scripted,
    tool_use,
)

from lattice import (
    AbortController,
    AbortSignal,
    Agent,
    RequestTimeoutError,
    Tool,
    define_history_store,
)
from lattice.cancellation import call_later
from lattice.testing import (
    assert_well_formed,
)


def test_request_timeout(gates):
    fn, _, _, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=50)
    started = time.monotonic()
    r = agent.prompt("go")
    assert time.monotonic() - started < QUICK
    assert r.subtype == "error_timeout" and r.is_error is True
    assert isinstance(r.error, RequestTimeoutError) and isinstance(r.error, TimeoutError)
    assert requests[0].timeout_ms == 50
    assert requests[0].signal.aborted  # fires on timeout
    assert_well_formed(json_copy(agent.get_history()))


def test_request_timeout_per_query_override(gates):
    fn, _, _, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=60_000)
    r = agent.prompt("go", request_timeout_ms=50)
    assert r.subtype == "error_timeout" and requests[0].timeout_ms == 50


def test_request_timeout_per_query_override_and_is_per_request():
    delays = [0.05, 0.05, 0.05]

    def fn(request):
        time.sleep(delays.pop(0))
        assert request.timeout_ms == 1000
        return reply(tool_use("t", {}, f"t{len(delays)}")) if delays else "done"

    agent = Agent(model="m", model_client=fn, request_timeout_ms=10,
                  tools=[Tool("t", "T.", {"type": "object"}, lambda a: "ok")])
    # each request takes 50 ms, the query far more than 10 ms: the override applies per request
    assert agent.prompt("x", request_timeout_ms=1000).result == "done"


def test_request_timeout_unset_means_none():
    agent, client = scripted(["ok"])
    agent.prompt("go")
    assert client.requests[0].timeout_ms is None


def test_request_timeout_is_per_request_not_per_query():
    # Three requests of 0.2 s under a 0.5 s timeout: each fits with 0.3 s to spare, while the
    # query (0.6 s) outlives it, so a per-query deadline would end it as error_timeout.
    def slowish(request):
        time.sleep(0.2)  # the model's own slowness, which the timeout measures: not a wait
        return reply(tool_use("t", {}, f"t{len(request.messages)}")) if len(request.messages) < 5 \
            else reply("done")

    agent, client = function_agent(slowish, request_timeout_ms=500,
                                   tools=[Tool("t", "T.", {"type": "object"}, lambda i: "x")])
    started = time.monotonic()
    assert agent.prompt("go").subtype == "success"
    assert len(client.requests) == 3 and time.monotonic() - started > 0.5


@pytest.mark.parametrize("value", [0, -1, True, False, 2.5, "100"])
def test_bad_request_timeout_per_query(value):
    agent, client = scripted(["ok"])
    with pytest.raises(ValueError, match="request_timeout_ms"):
        agent.prompt("go", request_timeout_ms=value)
    with pytest.raises(ValueError, match="request_timeout_ms"):
        run(agent, "go", request_timeout_ms=value)
    assert client.requests == []
    assert agent.prompt("go").result == "ok"


def test_a_client_raising_request_timeout_ends_the_query_as_error_timeout():
    def fn(request):
        raise RequestTimeoutError("client gave up")

    agent, _ = function_agent(fn)
    r = agent.prompt("go")
    assert r.subtype == "error_timeout" and isinstance(r.error, RequestTimeoutError)
    assert str(r.error) == "client gave up"


def test_request_signal_and_timeout_passed_to_client():
    seen = {}

    def fn(request):
        seen["signal"] = request.signal
        seen["timeout"] = request.timeout_ms
        request.signal.wait(5)  # a cooperative client stops when told
        return "late"

    agent = Agent(model="m", model_client=fn, request_timeout_ms=80)
    assert agent.prompt("x").subtype == "error_timeout"
    assert seen["timeout"] == 80 and isinstance(seen["signal"], AbortSignal)
    assert seen["signal"].aborted and isinstance(seen["signal"].reason, RequestTimeoutError)


def test_late_reply_after_timeout_never_enters_history(gates):
    before = set(lattice_threads())
    fn, _, release, requests = blocking_client(gates)
    agent, _ = function_agent(fn, request_timeout_ms=50)
    r = agent.prompt("go")
    assert r.subtype == "error_timeout" and r.result is None and r.num_turns <= 1
    release.set()
    join_lattice_threads(before, LONG)  # the worker has taken the late reply (and dropped it)
    assert agent.get_history() == [{"role": "user", "content": "go"}]


def test_an_ended_query_leaves_no_request_deadline_behind():
    """Fix: ``QueryRun.release`` cancels a pending request deadline (swap
    ``_request_done`` for ``_nothing`` under ``cond`` and call it); ``start_model`` stores
    ``_request_done`` under ``cond`` and cancels at once if the query already ended."""
    entered, release = threading.Event(), threading.Event()
    seen: List[Any] = []

    def slow(request: Any) -> str:
        seen.append((weakref.ref(agent._conversation.race), threading.current_thread()))
        entered.set()
        release.wait(WAIT_S)
        return "late"

    agent = Agent(model="m", model_client=slow, request_timeout_ms=600_000)
    controller = AbortController()
    threading.Thread(target=lambda: entered.wait(WAIT_S) and controller.abort()).start()
    assert agent.prompt("go", signal=controller.signal).subtype == "error_abort"
    release.set()
    race, worker = seen[0]
    worker.join(WAIT_S)
    gc.collect()
    assert race() is None, "the run is kept alive (by its 10-minute deadline timer)"


def test_a_slow_store_does_not_stall_other_agents_deadlines():
    """Fix: ``QueryRun.commit`` runs ``write()`` outside ``cond`` (a ``writing`` count taken
    under it); ``next_item`` and ``_repair_tail`` wait while ``writing``; ``_repair_tail``
    appends to the history after leaving ``cond``."""
    in_store, unblock = threading.Event(), threading.Event()
    controller = AbortController()
    aborted = threading.Event()
    controller.signal.add_callback(aborted.set)

    def append(message: Any) -> None:
        if message["role"] == "assistant":
            # The caller's signal fires on the shared timer thread during this write.
            call_later(0.01, controller.abort)
            in_store.set()
            unblock.wait(WAIT_S)

    slow_agent = Agent(model="m", model_client=lambda r: "reply",
                       history_store=define_history_store(append=append))
    first = threading.Thread(target=lambda: slow_agent.prompt("x", signal=controller.signal))
    first.start()
    hang = threading.Event()
    other = Agent(model="m", model_client=lambda r: hang.wait(WAIT_S) and "late",
                  request_timeout_ms=100)
    out: List[Any] = []
    second = threading.Thread(target=lambda: out.append(other.prompt("y")))
    try:
        assert in_store.wait(WAIT_S)
        assert aborted.wait(WAIT_S)
        second.start()
        second.join(3.0)  # the deadline is 100 ms
        assert out and out[0].subtype == "error_timeout", "the other agent's deadline stalled"
    finally:
        unblock.set()
        hang.set()
        first.join(WAIT_S)
        second.join(WAIT_S)
