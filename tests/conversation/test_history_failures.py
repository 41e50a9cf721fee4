"""Store failures through the Agent (SPEC 8, 10a): a store write that blocks, a store
failing at any write, a real full disk."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import echo_tool, reply, tool_use

from lattice import (
    AbortController,
    Agent,
    define_history_store,
)
from lattice.testing import ScriptedModelClient, assert_well_formed


def test_a_blocking_store_write_does_not_delay_abort():
    release = threading.Event()
    writing = threading.Event()

    def append(message):
        if message.get("role") == "assistant":
            writing.set()
            release.wait(10)

    controller = AbortController()
    agent = Agent(model="m", model_client=ScriptedModelClient([reply("slow to store")]),
                  history_store=define_history_store(append=append))
    threading.Thread(target=lambda: writing.wait(10) and controller.abort()).start()
    begun = time.monotonic()
    result = agent.prompt("go", signal=controller.signal)
    took = time.monotonic() - begun
    release.set()
    assert result.subtype == "error_abort" and took < 5
    assert_well_formed(agent.get_history())


@pytest.mark.parametrize("fail_on_error", [False, True])
@pytest.mark.parametrize("fail_at", range(6))
def test_a_store_failing_at_any_write_leaves_a_loadable_transcript(fail_on_error, fail_at):
    """Inject a failure at write number ``fail_at``: what the store holds is a prefix that
    resume makes sendable; memory agrees with what the caller was shown."""
    stored = []
    writes = [0]

    def append(message):
        writes[0] += 1
        if writes[0] == fail_at + 1:
            raise OSError("disk full")
        stored.append(message)

    def replace(messages):
        stored[:] = messages

    store = define_history_store(load=lambda: list(stored), append=append, replace=replace,
                                 fail_on_error=fail_on_error)
    replies = [reply(tool_use("echo", id="1"), tool_use("echo", id="2")), "done", "again"]
    agent = Agent(model="m", model_client=ScriptedModelClient(replies), tools=[echo_tool()],
                  history_store=store)
    for prompt in ("one", "two"):
        try:
            agent.prompt(prompt)
        except Exception as exc:
            assert fail_on_error and type(exc).__name__ == "HistoryStoreError"
    assert_well_formed(agent.get_history())
    resumed = Agent(model="m", model_client=ScriptedModelClient(["later"]),
                    history_store=define_history_store(load=lambda: list(stored)))
    assert_well_formed(resumed.get_history())
    assert resumed.prompt("three").result == "later"


def test_a_real_full_disk_keeps_the_conversation_in_memory(tmp_path):
    import subprocess

    from lattice.stores import JsonlHistoryStore

    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = mount / "chat.jsonl"
        big = "x" * 6000
        agent = Agent(model="m", model_client=ScriptedModelClient([big] * 6),
                      history_store=JsonlHistoryStore(path))
        for n in range(6):
            assert agent.prompt(f"q{n}").result == big
        assert len(agent.get_history()) == 12  # memory kept everything
        resumed = Agent(model="m", model_client=ScriptedModelClient([]),
                        history_store=JsonlHistoryStore(path))
        stored = resumed.get_history()
        assert 0 < len(stored) < 12
        assert stored == agent.get_history()[:len(stored)]  # a prefix
    finally:  # lazy: the stores' open files are closed later (a failed assert keeps them)
        subprocess.run(["umount", "-l", str(mount)], check=True)
