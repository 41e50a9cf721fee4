"""The store's version (``version()``: who wrote last?) is read once per query while the
session lock is held, not after every write: nobody else can write under the lock, so the
version this query's writes leave is read before the lock is given back. A query cut short
(abort) does not wait for that read: the next query loads the store again instead.
"""
from helpers import MODEL, add, reply, tool_use

from lattice import AbortController, Agent, SqliteHistoryStore
from lattice.testing import FunctionModelClient, assert_well_formed


class CountingStore(SqliteHistoryStore):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = {"version": 0, "load": 0, "append": 0}

    def version(self):
        self.calls["version"] += 1
        return super().version()

    def load(self):
        self.calls["load"] += 1
        return super().load()

    def append(self, message):
        self.calls["append"] += 1
        super().append(message)


def tool_turns(turns):
    def model(request):
        done = sum(1 for m in request.messages if m["role"] == "assistant")
        if done % (turns + 1) < turns:
            return reply(tool_use("add", {"a": done, "b": 1}, id=f"toolu_{len(request.messages)}"))
        return reply("done")
    return model


def agent_on(store, model, **options):
    return Agent(model=MODEL, model_client=FunctionModelClient(model), tools=[add],
                 history_store=store, **options)


def test_a_query_of_many_writes_reads_the_version_once_at_its_end(tmp_path):
    store = CountingStore(tmp_path / "h.db", "s")
    agent = agent_on(store, tool_turns(5))
    assert agent.prompt("go").subtype == "success"
    assert store.calls["append"] == 12  # the prompt, five replies and results, the answer
    first = dict(store.calls)
    assert first["version"] <= 2  # (the first query's look before it loads, and the end)
    assert agent.prompt("again").subtype == "success"
    second = {k: store.calls[k] - first[k] for k in store.calls}
    # The next query sees its own writes as its own: no reload; one look, one read at the end.
    assert second == {"version": 2, "load": 0, "append": 12}


def test_another_writer_is_still_seen_by_the_next_query(tmp_path):
    store = CountingStore(tmp_path / "h.db", "s")
    agent = agent_on(store, tool_turns(2))
    agent.prompt("go")
    SqliteHistoryStore(tmp_path / "h.db", "s").append({"role": "user", "content": "elsewhere"})
    loads = store.calls["load"]
    agent.prompt("again")
    assert store.calls["load"] == loads + 1
    assert {"role": "user", "content": "elsewhere"} in agent.get_history()
    assert_well_formed(agent.get_history())


def test_a_query_cut_short_leaves_the_version_unread_and_the_next_query_loads(tmp_path):
    store = CountingStore(tmp_path / "h.db", "s")
    controller = AbortController()

    def model(request):
        if len(request.messages) >= 3:  # the prompt, a reply, its result: abort now
            controller.abort("enough")
            return reply("late")
        return reply(tool_use("add", {"a": 1, "b": 2}))

    agent = agent_on(store, model)
    assert agent.prompt("go", signal=controller.signal).subtype == "error_abort"
    versions, loads = store.calls["version"], store.calls["load"]
    assert versions <= 1  # only the first query's look: the end did not wait for a read
    result = agent_on(store, tool_turns(0)).prompt("fresh agent")  # another Agent, same store
    assert result.subtype == "success"
    assert agent.prompt("same agent, next query").subtype == "success"
    assert store.calls["load"] >= loads + 2  # the aborted Agent loaded the store again
    assert_well_formed(agent.get_history())
    assert agent.get_history() == SqliteHistoryStore(tmp_path / "h.db", "s").load()
