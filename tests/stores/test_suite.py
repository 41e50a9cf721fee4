"""One suite for every store: round trip, what load skips, the session lock and the version,
in one process and across real processes (kill -9 included).

Runs against JSONL, SQLite and PostgreSQL (a real server, with psycopg and with pg8000), and
the memory store where a test does not need a second process.
"""

import logging
import os
import signal
import threading
import time

import pytest
from store_kinds import (
    PROCESS_KINDS,
    assistant,
    backend_for,
    child,
    dumps,
    raw_insert,
    user,
)

from lattice import ConcurrentQueryError

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX processes and signals")

ALL_KINDS = PROCESS_KINDS + ("memory",)


@pytest.fixture(params=ALL_KINDS)
def backend(request, tmp_path):
    yield from backend_for(request, tmp_path)


@pytest.fixture(params=PROCESS_KINDS)
def shared_backend(request, tmp_path):
    """A backend that several processes can use."""
    yield from backend_for(request, tmp_path)


HISTORY = [
    user("Book a table."),
    {"role": "assistant", "content": [
        {"type": "text", "text": "Booking."},
        {"type": "tool_use", "id": "toolu_1", "name": "book", "input": {"seats": 2}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "is_error": False}]},
    assistant("Done: ünïcödé, \"quotes\", \u2028 and a \ud800 lone surrogate."),
]


# -- the protocol ---------------------------------------------------------------------


def test_round_trip_in_order_and_from_a_fresh_store(backend):
    store = backend.store()
    assert store.load() == []
    for message in HISTORY:
        store.append(message)
    assert store.load() == HISTORY
    assert backend.store().load() == HISTORY
    store.replace(HISTORY[:1] + [assistant("summary")])
    assert backend.store().load() == HISTORY[:1] + [assistant("summary")]
    store.replace([])
    assert backend.store().load() == []


def test_sessions_are_separate(backend):
    if backend.kind in ("memory",):
        pytest.skip("a memory store is one session")
    backend.store().append(user("mine"))
    backend.store("other-" + backend.session).append(user("theirs"))
    assert backend.store().load() == [user("mine")]


NOT_MESSAGES = [
    {"content": "x"},                                              # no role
    {"role": "robot", "content": "x"},                             # unknown role
    {"role": "user", "content": 5},                                # content not str/list
    {"role": "user"},                                              # no content
    {"role": "assistant", "content": ["just a string"]},           # a block that is a string
    {"role": "assistant", "content": [{"text": "no type"}]},       # a block without type
    {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]},  # no id
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]},    # no name
    {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},  # no tool_use_id
    [1, 2],
    "text",
]


def test_values_that_are_not_messages_are_skipped_and_logged_once(backend, caplog):
    store = backend.store()
    store.append(user("first"))
    if backend.kind == "memory":
        store.messages.extend(NOT_MESSAGES)
    else:
        raw_insert(backend.kind, backend.where, backend.session,
                   [dumps(v) for v in NOT_MESSAGES] + ["{not json"])
    store.append(user("last"))
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert backend.store().load() == [user("first"), user("last")]
    warnings = [r for r in caplog.records if r.name == "lattice"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    text = warnings[0].getMessage()
    unreadable = 0 if backend.kind == "memory" else 1
    assert f"skipped {len(NOT_MESSAGES) + unreadable} corrupt" in text
    assert f"{len(NOT_MESSAGES)} not a history message" in text
    if backend.kind == "jsonl":
        assert backend.store().path in text
    elif backend.kind != "memory":
        assert backend.session in text


def test_messages_with_extra_keys_and_unknown_block_types_are_kept(backend):
    kept = [
        {"role": "user", "content": [{"type": "image", "source": {}}], "note": 1},
        {"role": "assistant", "content": [], "stop_reason": "end_turn"},
    ]
    store = backend.store()
    for message in kept:
        store.append(message)
    assert backend.store().load() == kept


# -- the session lock -------------------------------------------------------------------


def test_a_second_holder_is_refused_then_served_after_release(backend):
    with backend.store().lock():
        with pytest.raises(ConcurrentQueryError, match="busy"):
            with backend.store().lock():
                pass
        with pytest.raises(ConcurrentQueryError):
            with backend.store().lock(wait_s=0.05):
                pass
    with backend.store().lock():
        pass


def test_the_holder_still_reads_and_writes_and_others_read(backend):
    store = backend.store()
    with store.lock():
        store.append(user("while held"))
        assert backend.store().load() == [user("while held")]
        store.replace([user("replaced while held")])
    assert backend.store().load() == [user("replaced while held")]


def test_the_lock_is_released_when_the_block_raises(backend):
    with pytest.raises(RuntimeError):
        with backend.store().lock():
            raise RuntimeError("query failed")
    with backend.store().lock():
        pass


def test_wait_s_waits_for_the_holder(backend):
    held = threading.Event()
    release = threading.Event()

    def holder():
        with backend.store().lock():
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(30)
    timer = threading.Timer(0.3, release.set)
    timer.start()
    started = time.monotonic()
    with backend.store().lock(wait_s=30):
        waited = time.monotonic() - started
    thread.join(30)
    assert release.is_set() and 0.2 < waited < 25


def test_sessions_lock_independently(backend):
    if backend.kind == "memory":
        pytest.skip("a memory store is one session")
    with backend.store().lock(), backend.store("other-" + backend.session).lock():
        pass


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", True, None])
def test_bad_wait_s_is_refused_by_name(backend, bad):
    with pytest.raises(ValueError, match="wait_s"):
        backend.store().lock(wait_s=bad)


# -- the version ------------------------------------------------------------------------


def test_version_changes_with_every_write_and_only_then(backend):
    store = backend.store()
    seen = [store.version()]
    for step in (lambda: store.append(user("a")), lambda: store.append(assistant("b")),
                 lambda: store.replace([user("a")]), lambda: store.replace([user("a")]),
                 lambda: store.append(assistant("c"))):
        step()
        now = backend.store().version()
        assert now == store.version()  # nothing written in between: stable
        assert now not in seen
        seen.append(now)


# -- across processes -------------------------------------------------------------------

HOLD = """
    import sys, time
    from store_kinds import make_store
    store = make_store(sys.argv[1], sys.argv[2], sys.argv[3])
    with store.lock():
        print("held", flush=True)
        time.sleep(600)
"""


@pytest.mark.slow
def test_a_holder_in_another_process_excludes_and_kill_9_frees_the_session(shared_backend):
    b = shared_backend
    proc = child(HOLD, b.kind, b.where, b.session)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(ConcurrentQueryError):
            with b.store().lock(wait_s=0.2):
                pass
        b.store().append(user("a non-holder may still write"))  # the lock guards queries
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(30)
        with b.store().lock(wait_s=30):
            freed_after = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    assert freed_after < 10  # SPEC 16: a killed holder frees its session within 10 s


WRITE = """
    import sys, json
    from store_kinds import make_store
    store = make_store(sys.argv[1], sys.argv[2], sys.argv[3])
    if sys.argv[4] == "append":
        store.append({"role": "user", "content": "from the other process"})
    else:
        store.replace([{"role": "user", "content": "rewritten elsewhere"}])
"""


@pytest.mark.parametrize("how", ["append", "replace"])
def test_version_shows_another_process_wrote(shared_backend, how):
    b = shared_backend
    mine = b.store()
    mine.append(user("hello"))
    seen = mine.version()
    proc = child(WRITE, b.kind, b.where, b.session, how)
    assert proc.wait(60) == 0
    proc.stdout.close()
    assert mine.version() != seen
