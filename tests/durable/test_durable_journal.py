"""A durable run's journal entry for the first call of a batch rides on the write of the
reply that asks for it, where the store writes both at once (one round trip per call
fewer: ``append_and_save_run`` with the whole record, or ``append_and_save_calls`` with
the entry alone on a store that writes entries by themselves, SQLite). Only for a batch that starts at once: not in
lockstep (``query()``: a consumer holding the reply may never let it start), not for calls
waiting for approval, and never for a call that cannot run."""

import pytest
from durable_world import UNCERTAIN, World, record, reply, use

from lattice import HistoryStoreError, MemoryHistoryStore, Tool, ToolContext, ToolResult
from lattice.testing import assert_well_formed


class OneWriteStore(MemoryHistoryStore):
    """A memory store that can write a message and a run record at once, and logs writes."""

    def __init__(self):
        super().__init__()
        self.writes = []

    def append(self, message):
        self.writes.append(("append", message["role"]))
        super().append(message)

    def save_run(self, record):
        self.writes.append(("save_run", sorted(record.get("started_calls") or {})))
        super().save_run(record)

    def append_and_save_run(self, message, record):
        self.writes.append(("both", message["role"], sorted(record.get("started_calls") or {})))
        super().append(message)
        super().save_run(record)


def test_prompt_journals_the_first_call_with_its_reply_and_the_rest_before_they_run():
    store = OneWriteStore()
    world = World([reply(use("c1"), use("l1", "lookup", key="k")), reply(use("c2"))])
    result = world.agent(store).prompt("go", run_id="r")
    assert result.subtype == "success"
    assert store.writes == [
        ("both", "user", []),  # the run's record with its prompt
        ("both", "assistant", ["c1"]),  # the reply, and its first call started
        ("save_run", ["c1", "l1"]),  # the second call, before its handler
        ("append", "user"),  # the results
        ("both", "assistant", ["c1", "c2", "l1"]),
        ("append", "user"),
        ("append", "assistant"),  # the answer
        ("save_run", ["c1", "c2", "l1"]),  # the end
    ]
    assert [e[1] for e in world.effects] == ["c1", "l1", "c2"]


def test_query_in_lockstep_journals_each_call_just_before_it_runs():
    store = OneWriteStore()
    world = World([reply(use("c1"))])
    items = list(world.agent(store).query("go", run_id="r"))
    assert items[-1].subtype == "success"
    assert ("both", "assistant", ["c1"]) not in store.writes
    assert store.writes[1:4] == [("append", "assistant"), ("save_run", ["c1"]),
                                 ("append", "user")]


def test_a_call_that_cannot_run_is_never_journaled_with_its_reply():
    store = OneWriteStore()
    world = World([reply(use("x1", "no_such_tool"), use("c1"))])
    assert world.agent(store).prompt("go", run_id="r").subtype == "success"
    assert ("both", "assistant", ["c1"]) in store.writes  # the first call that can run


def test_calls_waiting_for_approval_are_not_journaled_with_their_reply():
    store = OneWriteStore()
    world = World([reply(use("p1", "pay"))])
    world.tools.append(Tool("pay", "Pay.", {"type": "object"}, lambda args: "paid",
                            requires_approval=True))
    result = world.agent(store).prompt("go", run_id="r")
    assert result.subtype == "awaiting_approval"
    assert store.load_run("r")["started_calls"] == {}
    assert ("append", "assistant") in store.writes


@pytest.mark.parametrize("tool, expected", [("charge", "unknown"), ("lookup", "again")])
def test_a_crash_after_the_reply_was_written_settles_the_ridden_call_by_the_rules(tool,
                                                                                 expected):
    """What a process killed between the write and the handler leaves: the call counts as
    started, so a non-idempotent one is answered "unknown", an idempotent one runs again."""
    store = OneWriteStore()
    store.append({"role": "user", "content": "go"})
    call = use("t1", tool, key="k") if tool == "lookup" else use("t1")
    store.append_and_save_run(reply(call), record(started_calls={"t1": 1}))
    world = World()
    assert world.agent(store).prompt("go", run_id="r").subtype == "success"
    answered = store.messages[2]["content"][0]
    if expected == "unknown":
        assert answered["content"] == UNCERTAIN and world.effects == []
    else:
        assert world.effects == [("lookup", "t1", "r", 2)]


# -- compaction inside a durable run ---------------------------------------------------------

def test_a_run_compacted_then_crashed_resumes_with_its_prompt_once_and_whole_totals():
    """Compaction rewrites the history mid-run: the record says where the prompt is now
    (summarised: 0) and keeps the replies and usage it summarised away, so a resume neither
    stores the prompt again (the compacted history is shorter than the prompt's old index)
    nor forgets turns."""
    from lattice import Agent, AutoCompact
    from lattice.testing import FunctionModelClient

    store = MemoryHistoryStore()
    for n in range(3):  # an earlier conversation: the run's prompt goes in at index 6
        store.append({"role": "user", "content": f"old question {n}"})
        store.append({"role": "assistant", "content": f"old answer {n}"})
    calls = []

    def tool_turn(tokens):
        return {"content": [use(f"l{len(calls)}", "lookup", key="k")],
                "usage": {"input_tokens": tokens, "output_tokens": 1}}

    def model(request):
        if not request.tools:  # the summary request
            return {"content": [{"type": "text", "text": "SUMMARY"}],
                    "usage": {"input_tokens": 7, "output_tokens": 7}}
        calls.append(request)
        n = len(calls)
        if n == 4:
            raise RuntimeError("the process dies here")
        if n == 5:
            return {"content": [{"type": "text", "text": "done"}],
                    "usage": {"input_tokens": 10, "output_tokens": 1}}
        return tool_turn(1000 if n == 2 else 10)  # the second reply's size compacts

    world = World()

    def agent():
        return Agent(model="m", model_client=FunctionModelClient(model), tools=world.tools,
                     history_store=store, auto_compact=AutoCompact(threshold_tokens=500,
                                                                   keep_recent_messages=2))

    with pytest.raises(RuntimeError):
        agent().prompt("go", run_id="r")
    record = store.load_run("r")
    assert record["state"] == "running" and record["index"] == 0
    assert record["compacted_turns"] == 1  # the first reply was summarised away
    assert record["compacted_usage"]["input_tokens"] == 10 + 7
    result = agent().prompt("go", run_id="r")
    assert result.subtype == "success" and result.result == "done"
    assert not any(m["content"] == "go" for m in store.messages)  # in the summary only
    assert result.num_turns == 4  # three tool turns and the answer, across both attempts
    assert result.usage.input_tokens == 10 + 1000 + 10 + 10 + 7
    assert len(world.effects) == 3


# -- a person's refusals survive a crash of the approval query -----------------------------------

class DyingStore(MemoryHistoryStore):
    """Writes until ``dies_after(what)`` says a write was the last one (as a killed process,
    or a database going down), then refuses every write. By default the last is the journal
    entry of call ``p1``: what is stored is what a crash while ``p1`` ran leaves."""

    dead = died = False

    def dies_after(self, method, value):
        return method == "save_run" and "p1" in (value.get("started_calls") or {})

    def append(self, message):
        self._write("append", message)

    def save_run(self, record):
        self._write("save_run", record)

    def _write(self, method, value):
        if self.dead:
            raise OSError("the process is gone")
        getattr(super(), method)(value)
        if not self.died and self.dies_after(method, value):
            self.dead = self.died = True  # once: a test brings it back with dead = False


def two_payments(store):
    from lattice import Agent
    from lattice.testing import FunctionModelClient

    paid = []

    def pay(args, context):
        paid.append(context.tool_use_id)
        return "paid"

    tool = Tool("pay", "Pay.", {"type": "object"}, pay, requires_approval=True)
    model = FunctionModelClient(
        lambda r: {"content": [use("p1", "pay"), use("p2", "pay"), use("p3", "pay")]}
        if len(r.messages) == 1 else "ok")

    def agent():
        return Agent(model="m", model_client=model, tools=[tool], history_store=store)

    assert agent().prompt("pay the bills").subtype == "awaiting_approval"
    return agent, paid


DECISIONS = {"p1": True, "p2": "too expensive",
             "p3": ToolResult("paid by hand already", is_error=False)}


def answers(store):
    tail = store.messages[-3]["content"] if store.messages[-1]["role"] == "assistant" \
        else store.messages[-1]["content"]
    return {b["tool_use_id"]: (b["content"], b.get("is_error", False)) for b in tail}


@pytest.mark.parametrize("run_id", [None, "decided"])
def test_refusals_given_with_approvals_stand_after_a_crash(run_id):
    store = DyingStore()
    agent, paid = two_payments(store)
    then = "and then tell me" if run_id else None
    if run_id is None:
        agent().prompt(then, approvals=DECISIONS)  # "dies" while p1 runs
    else:  # a run id is never answered from memory alone (SPEC 21b): the end cannot be
        with pytest.raises(HistoryStoreError):  # recorded, so the query raises
            agent().prompt(then, approvals=DECISIONS, run_id=run_id)
    assert paid == ["p1"] and store.messages[-1]["role"] == "assistant"
    store.dead = False  # a new process, the same store
    if run_id is None:  # another query takes the conversation over
        assert agent().prompt("and now?").subtype == "success"
    else:  # the approval run is continued by its id (the job delivered again)
        assert agent().prompt(then, run_id=run_id).subtype == "success"
        assert store.messages[-2]["content"] == then
    got = answers(store)
    assert got["p1"] == (UNCERTAIN, True)  # started: unknown, never paid twice
    assert got["p2"] == ("too expensive", True)  # the person's words, not "not approved"
    assert got["p3"] == ("paid by hand already", False)
    assert paid == ["p1"]
    assert_well_formed(store.messages)


class DiesAfterResults(DyingStore):
    def dies_after(self, method, value):  # the results are stored, the prompt after not
        return method == "append" and value["role"] == "user" and \
            isinstance(value["content"], list)


def test_an_approval_run_stopped_after_its_results_stores_its_prompt_once():
    store = DiesAfterResults()
    agent, paid = two_payments(store)
    then = "and then tell me"
    with pytest.raises(HistoryStoreError):  # the end cannot be recorded (SPEC 21b)
        agent().prompt(then, approvals=DECISIONS, run_id="decided")
    assert store.messages[-1]["content"][0]["tool_use_id"] == "p1"
    store.dead = False
    assert agent().prompt(then, run_id="decided").subtype == "success"
    assert [m["content"] for m in store.messages].count(then) == 1
    assert store.messages[-2]["content"] == then and paid == ["p1"]
    assert_well_formed(store.messages)


# -- a lenient store that fails: no call runs unjournaled --------------------------------------

class FailsFromTheFirstReply(DyingStore):
    """``fail_on_error`` off; every write fails once the first reply comes."""

    def append(self, message):
        self.dead = self.dead or message["role"] == "assistant"
        super().append(message)

    def dies_after(self, method, value):
        return False


def test_a_call_whose_start_cannot_be_journaled_never_runs_with_a_run_id(caplog):
    """With a run id the journal is written as if fail_on_error were on (SPEC 21b): a
    lenient store that failed before a call's start could be recorded makes the query
    raise, and no call runs unrecorded (not even an idempotent one: the run stays running
    and the next call with its id resumes it)."""
    store = FailsFromTheFirstReply()
    world = World([reply(use("c1"), use("l1", "lookup", key="k"))])
    with pytest.raises(HistoryStoreError, match="save_run"):
        world.agent(store).prompt("go", run_id="r")
    assert world.effects == []
    assert store.load_run("r")["state"] == "running"
    assert "history store append failed" in caplog.text


def test_a_resumed_record_that_differs_from_the_stored_one_is_written_whole_first(tmp_path):
    """SQLite writes a tool turn's journal entry alone (``append_and_save_calls``) only for
    a record it holds as the run has it. A record that a compaction saved before a crash
    stopped its rewrite is taken back on resume (``checked_against``): the first write of
    the resumed run is then the whole record, so the store no longer holds the undone
    compaction while the call runs."""
    from lattice import Agent, SqliteHistoryStore, tool
    from lattice.testing import FunctionModelClient

    path = str(tmp_path / "h.db")
    store = SqliteHistoryStore(path, "s")
    store.append({"role": "user", "content": "go"})
    store.save_run(record(compacted_turns=4, compacting={
        "first": "not the history's first message", "index": 0, "compacted_turns": 0,
        "compacted_usage": {"input_tokens": 0, "output_tokens": 0}}))
    seen = []

    @tool
    def look(amount: int) -> str:
        """Look at the stored record while the call runs."""
        stored = SqliteHistoryStore(path, "s").load_run("r")
        seen.append((stored.get("compacting"), stored.get("compacted_turns", 0),
                     sorted(stored["started_calls"])))
        return "looked"

    world = World([reply(use("t1", "look")), reply(use("t2", "look"))])
    agent = Agent(model="m", model_client=FunctionModelClient(world.model), tools=[look],
                  history_store=SqliteHistoryStore(path, "s"))
    assert agent.prompt("go", run_id="r").subtype == "success"
    # the first turn wrote the record whole (the compaction undone), the second its entry
    assert seen == [(None, 0, ["t1"]), (None, 0, ["t1", "t2"])]


def test_on_sqlite_every_call_is_journaled_before_it_runs_ridden_or_not(tmp_path):
    """SQLite writes entries alone: the first call of a batch with its reply, the others
    (and every call of a ``query()`` in lockstep) by ``save_calls`` just before they run.
    Each handler finds its own entry already stored."""
    from lattice import Agent, SqliteHistoryStore, tool
    from lattice.testing import FunctionModelClient

    path = str(tmp_path / "h.db")
    seen = []

    @tool
    def look(amount: int, context: ToolContext) -> str:
        """Look at the stored journal while the call runs."""
        stored = SqliteHistoryStore(path, "s").load_run(context.run_id)
        seen.append((context.tool_use_id, context.tool_use_id in stored["started_calls"]))
        return "looked"

    for run_id, query in (("p", False), ("q", True)):
        world = World([reply(use(f"{run_id}1", "look"), use(f"{run_id}2", "look")),
                       reply(use(f"{run_id}3", "look"))])
        agent = Agent(model="m", model_client=FunctionModelClient(world.model),
                      tools=[look], history_store=SqliteHistoryStore(path, "s"))
        if query:
            *_, result = agent.query("go", run_id=run_id)
        else:
            result = agent.prompt("go", run_id=run_id)
        assert result.subtype == "success"
        assert sorted(SqliteHistoryStore(path, "s").load_run(run_id)["started_calls"]) == [
            f"{run_id}1", f"{run_id}2", f"{run_id}3"]
    assert seen == [(f"{r}{n}", True) for r in "pq" for n in (1, 2, 3)]
