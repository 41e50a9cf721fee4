"""The three bugs issue 33 found in the durable wing's seams, and SPEC 21b's rules on
follow() cursors, whole replays, and run ids never answered from memory alone. Each test
here failed before its fix."""

import threading

import pytest
from durable_world import World, reply, use

from lattice import (
    Agent,
    AutoCompact,
    HistoryStoreError,
    MemoryHistoryStore,
    Tool,
    follow,
)
from lattice.testing import FunctionModelClient, ScriptedModelClient


def kinds(items):
    return [i.type for i in items]


# -- follow(run_id=) of a superseded run stops at the run's own end --------------------------

def test_a_superseded_run_is_followed_to_its_own_end_only():
    store = MemoryHistoryStore()
    store.append({"role": "user", "content": "first"})
    store.append(reply(use("c1")))  # a run a crash left running, its call never started
    store.runs["r1"] = {"run_id": "r1", "state": "running", "prompt": "first", "index": 0,
                        "started_at": 1.0, "updated_at": 1.0, "started_calls": {}}
    world = World()
    assert world.agent(store).prompt("second").subtype == "success"  # supersedes r1
    assert store.load_run("r1")["end_index"] == 3  # its prompt, reply, and the answer
    items = list(follow(store, run_id="r1", poll_s=0.01, wait_s=2))
    assert kinds(items) == ["user", "assistant", "user", "result"]
    assert "second" not in [i.message.get("content") for i in items[:-1]]
    assert items[-1].subtype == "interrupted" and items[-1].replayed


# -- follow() cursors are stable -------------------------------------------------------------

def test_after_past_the_history_waits_and_a_rewrite_under_it_is_no_error():
    store = MemoryHistoryStore([{"role": "user", "content": f"m{n}"} for n in range(3)])
    got, errors = [], []
    started = threading.Event()

    def follower():
        try:
            for item in follow(store, after=5, poll_s=0.005, wait_s=1.0):
                got.append(item)
                started.set()
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            errors.append(exc)

    reader = threading.Thread(target=follower)
    reader.start()
    threading.Event().wait(0.1)  # it polls a history shorter than its cursor for a while
    store.replace([{"role": "user", "content": "summary"}, {"role": "user", "content": "m2"}])
    for n in range(3, 9):
        store.append({"role": "user", "content": f"m{n}"})
    reader.join(10)
    assert errors == []
    assert kinds(got)[0] == "system" and got[0].subtype == "compaction"
    # the cursor kept its place after the last message it had seen (m2): 2 past it
    assert [i.message["content"] for i in got[1:]] == ["m5", "m6", "m7", "m8"]


def test_a_run_not_recorded_yet_yields_no_other_runs_messages():
    store = MemoryHistoryStore()
    World().agent(store).prompt("someone else's")
    controller_done = threading.Event()
    got = []

    def follower():
        got.extend(follow(store, run_id="mine", poll_s=0.005, wait_s=0.3))
        controller_done.set()

    reader = threading.Thread(target=follower)
    reader.start()
    reader.join(10)
    assert controller_done.is_set() and got == []


# -- a crash between compaction's record and its rewrite does not over-count -----------------

class DiesAfterTheCompactionRecord(MemoryHistoryStore):
    """Writes until the run record of a compaction is saved, then refuses every write: what
    a process killed between saving the record and rewriting the history leaves."""

    dead = False

    def save_run(self, record):
        if self.dead:
            raise OSError("the process is gone")
        super().save_run(record)
        if record.get("compacted_turns"):
            self.dead = True

    def append(self, message):
        if self.dead:
            raise OSError("the process is gone")
        super().append(message)

    def replace(self, messages):
        if self.dead:
            raise OSError("the process is gone")
        super().replace(messages)


def test_a_crash_between_compactions_record_and_rewrite_counts_each_turn_once():
    store = DiesAfterTheCompactionRecord()
    for n in range(3):  # an earlier conversation: the run's prompt goes in at index 6
        store.append({"role": "user", "content": f"old question {n}"})
        store.append({"role": "assistant", "content": f"old answer {n}",
                      "usage": {"input_tokens": 500, "output_tokens": 500}})
    calls = []

    def model(request):
        if not request.tools:  # the summary request
            return {"content": [{"type": "text", "text": "SUMMARY"}],
                    "usage": {"input_tokens": 7, "output_tokens": 7}}
        calls.append(request)
        if len(calls) >= 3:
            return {"content": [{"type": "text", "text": "done"}],
                    "usage": {"input_tokens": 10, "output_tokens": 1}}
        return {"content": [use(f"l{len(calls)}", "lookup", key="k")],
                "usage": {"input_tokens": 1000 if len(calls) == 2 else 10,
                          "output_tokens": 1}}

    world = World()

    def agent():
        return Agent(model="m", model_client=FunctionModelClient(model), tools=world.tools,
                     history_store=store, auto_compact=AutoCompact(threshold_tokens=500,
                                                                   keep_recent_messages=2))

    try:  # the history cannot be rewritten; then (SPEC 21b) the run's journal cannot be
        agent().prompt("go", run_id="r")  # written either, and the query stops
    except HistoryStoreError:
        pass
    assert store.load_run("r")["compacted_turns"] == 1
    assert len(store.messages) == 6 + 5  # the old history: the rewrite never happened
    store.dead = False  # a new process, the same store
    result = agent().prompt("go", run_id="r")
    assert result.subtype == "success" and result.result == "done"
    # two tool turns stored before the crash, the answer after: each counted once
    assert result.num_turns == 3
    assert result.usage.input_tokens == 10 + 1000 + 10
    assert len([e for e in world.effects if e[0] == "lookup"]) == 2


# -- a replay is the recorded ending, whole -------------------------------------------------

def test_a_replayed_awaiting_approval_lists_the_pending_calls_as_recorded():
    store = MemoryHistoryStore()
    wire = Tool("wire", "Send money.", {"type": "object"}, lambda args: "sent",
                requires_approval=True)
    client = ScriptedModelClient([
        {"content": [{"type": "tool_use", "id": "w1", "name": "wire", "input": {"to": "a"}},
                     {"type": "tool_use", "id": "w2", "name": "wire", "input": {"to": "b"}}],
         "stop_reason": "tool_use"},
        "fine, nothing sent"])
    agent = Agent(model="m", model_client=client, tools=[wire], history_store=store)
    first = agent.prompt("pay both", run_id="job")
    assert first.subtype == "awaiting_approval"
    agent.prompt("never mind")  # the user moved on: the history has no pending calls now
    replayed = Agent(model="m", model_client=client, tools=[wire],
                     history_store=store).prompt("pay both", run_id="job")
    assert replayed.replayed and replayed.subtype == "awaiting_approval"
    assert [(c.id, c.name, c.input) for c in replayed.pending_approvals] == [
        ("w1", "wire", {"to": "a"}), ("w2", "wire", {"to": "b"})]
    assert replayed.pending_approvals[0].tool is wire


def dying(cls):
    """``cls`` with writes that stop once the journal says call ``f1`` started: what a
    process killed while ``f1`` ran leaves (the flag is the class's: a "new process" makes
    a new store and sets ``dead`` back)."""

    class Dying(cls):
        dead = died = False

        def _check(self):
            if Dying.dead:
                raise OSError("the process is gone")

        def _after(self, record):
            if not Dying.died and "f1" in (record.get("started_calls") or {}):
                Dying.dead = Dying.died = True

        def append(self, message):
            self._check()
            super().append(message)

        def replace(self, messages):
            self._check()
            super().replace(messages)

        def save_run(self, record):
            self._check()
            super().save_run(record)
            self._after(record)

        if hasattr(cls, "append_and_save_run"):
            def append_and_save_run(self, message, record):
                self._check()
                super().append_and_save_run(message, record)
                self._after(record)

        if hasattr(cls, "save_calls"):  # (journal entries by themselves: SQLite)
            def save_calls(self, run_id, calls):
                self._check()
                super().save_calls(run_id, calls)
                self._after({"started_calls": calls})

            def append_and_save_calls(self, message, run_id, calls):
                self._check()
                super().append_and_save_calls(message, run_id, calls)
                self._after({"started_calls": calls})

    return Dying


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "memory"])
def test_an_approved_idempotent_call_killed_mid_run_runs_again_on_every_store(kind, tmp_path):
    from lattice import JsonlHistoryStore, SqliteHistoryStore

    made = {"jsonl": (dying(JsonlHistoryStore), (str(tmp_path / "s.jsonl"),), {}),
            "sqlite": (dying(SqliteHistoryStore), (str(tmp_path / "s.db"),),
                       {"session_id": "s"}),
            "memory": (dying(MemoryHistoryStore), (), {})}[kind]
    shared = made[0](*made[1], **made[2])

    def make():
        return shared if kind == "memory" else made[0](*made[1], **made[2])

    attempts = []

    def fetch(args, context):
        attempts.append(context.attempt)
        return "fetched"

    tool = Tool("fetch", "Fetch (safe to repeat).", {"type": "object"}, fetch,
                requires_approval=True, idempotent=True)
    client = FunctionModelClient(
        lambda r: {"content": [use("f1", "fetch")], "stop_reason": "tool_use"}
        if len(r.messages) == 1 else "got it")

    def agent():
        return Agent(model="m", model_client=client, tools=[tool], history_store=make())

    assert agent().prompt("fetch it", run_id="job").subtype == "awaiting_approval"
    with pytest.raises(HistoryStoreError):  # "killed" once f1's start is journaled
        agent().prompt("and then?", approvals={"f1": True}, run_id="job-approved")
    made[0].dead = False  # a new process, the same store
    again = agent()
    assert again.pending_approvals() == []  # journaled as started: no longer pending
    result = again.prompt("and then?", run_id="job-approved")  # the job delivered again
    assert result.subtype == "success" and attempts == [1, 2]


# -- a run id is never answered from memory alone -----------------------------------------------

class LockFails(MemoryHistoryStore):
    def lock(self, *, wait_s=0.0):
        raise OSError("the lock table is unreachable")


def test_a_lock_the_store_cannot_give_raises_for_a_run_id_only():
    world = World()
    with pytest.raises(HistoryStoreError, match="lock"):
        world.agent(LockFails()).prompt("go", run_id="r")
    assert world.requests == []
    assert world.agent(LockFails()).prompt("go").subtype == "success"  # 0.3's meaning


class EndFails(MemoryHistoryStore):
    fail = True

    def save_run(self, record):
        if self.fail and record.get("state") == "ended":
            raise OSError("the disk is full")
        super().save_run(record)


def test_an_end_the_store_cannot_record_raises_and_the_run_resumes_later():
    store = EndFails()  # fail_on_error=False: a run id makes its record strict anyway
    world = World()
    with pytest.raises(HistoryStoreError, match="save_run.*disk is full"):
        world.agent(store).prompt("go", run_id="r")
    assert store.load_run("r")["state"] == "running"
    requests = len(world.requests)
    store.fail = False
    result = world.agent(store).prompt("go", run_id="r")
    assert result.subtype == "success" and len(world.requests) == requests  # from the store
    assert store.load_run("r")["state"] == "ended"
