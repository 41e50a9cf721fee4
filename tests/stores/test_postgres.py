"""PostgresHistoryStore beyond the shared suite: conninfo, laziness, secrets, the table,
drivers, and a server that restarts or kills connections (a real PostgreSQL server)."""

import logging
import sys
import threading
import time
import uuid

import pytest
import real_parts
from store_kinds import assistant, pg_connect, user

import lattice
from lattice import Agent, HistoryStoreError, PostgresHistoryStore
from lattice.conversation.history import History
from lattice.conversation.store_link import StoreLink
from lattice.stores.pg_conninfo import parse_conninfo, pg8000_arguments, redacted
from lattice.testing import FunctionModelClient

DRIVERS = ["psycopg", "pg8000"]


@pytest.fixture(params=DRIVERS)
def driver(request):
    real_parts.require(request.param)
    return request.param


def call_store(store, method, *args):
    """One store call under the Agent's failure policy (lattice/conversation/store_link.py)."""
    return StoreLink(store, History()).save(method, *args)


def new_session():
    return f"pg-{uuid.uuid4().hex[:12]}"


# -- conninfo (no server) -----------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("host=/tmp/sock port=5433 dbname=app user=me",
     {"host": "/tmp/sock", "port": "5433", "dbname": "app", "user": "me"}),
    ("  host = db.example   password='a b\\'c'  dbname=x\\ y ",
     {"host": "db.example", "password": "a b'c", "dbname": "x y"}),
    ("password=''", {"password": ""}),
    ("", {}),
    ("postgresql://me:s%40cret@db.example:5433/app?sslmode=require&application_name=w",
     {"user": "me", "password": "s@cret", "host": "db.example", "port": "5433",
      "dbname": "app", "sslmode": "require", "application_name": "w"}),
    ("postgres://%2Frun%2Fpg/app", {"host": "/run/pg", "dbname": "app"}),
    ("postgresql:///app?host=/run/pg&port=6000",
     {"dbname": "app", "host": "/run/pg", "port": "6000"}),
    ("postgresql://[::1]:5432/db", {"host": "::1", "port": "5432", "dbname": "db"}),
    ("POSTGRESQL://u@h", {"user": "u", "host": "h"}),
])
def test_conninfo_forms_are_parsed_like_libpq(text, expected):
    assert parse_conninfo(text) == expected


@pytest.mark.parametrize("text", ["host", "host=x password='hunter2", "=x",
                                  "postgresql://a,b/db", "postgresql://h/db?x"])
def test_malformed_conninfo_is_refused_without_quoting_secrets(text):
    with pytest.raises(ValueError, match="conninfo") as info:
        PostgresHistoryStore(text, "s")
    assert "hunter2" not in str(info.value)


def test_pg8000_gets_the_same_meaning():
    args = pg8000_arguments(parse_conninfo("host=/run/pg port=6000 dbname=app user=me "
                                           "password=pw connect_timeout=3"))
    assert args == {"user": "me", "database": "app", "password": "pw",
                    "unix_sock": "/run/pg/.s.PGSQL.6000", "timeout": 3}
    tcp = pg8000_arguments(parse_conninfo("postgresql://me@db.example:5433/app"))
    assert (tcp["host"], tcp["port"], tcp["database"]) == ("db.example", 5433, "app")
    assert "ssl_context" not in tcp
    secure = pg8000_arguments(parse_conninfo("host=h user=u sslmode=verify-full"))
    assert secure["ssl_context"].check_hostname is True
    with pytest.raises(ValueError, match="target_session_attrs"):
        pg8000_arguments({"target_session_attrs": "read-write"})
    with pytest.raises(ValueError, match="port"):
        pg8000_arguments({"port": "five"})


def test_redacted_hides_secrets():
    assert redacted({"host": "h", "password": "hunter2", "dbname": "a b"}) == \
        "host=h password=*** dbname='a b'"


@pytest.mark.parametrize("kwargs, name", [
    ({"table": "x; DROP TABLE y"}, "table"), ({"table": "1abc"}, "table"),
    ({"table": "a.b.c"}, "table"), ({"connect": 5}, "connect"), ({"driver": "psycopg2"}, "driver"),
])
def test_bad_options_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PostgresHistoryStore("host=/x", "s", **kwargs)
    with pytest.raises(ValueError, match="session_id"):
        PostgresHistoryStore("host=/x", "")
    with pytest.raises(ValueError, match="conninfo"):
        PostgresHistoryStore(None, "s")


def test_importing_lattice_imports_no_driver():
    code = ("import sys, lattice; lattice.PostgresHistoryStore('host=/x', 's'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('psycopg', 'pg8000', 'sqlite3')))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": lattice.__path__[0] + "/.."})
    assert out.stdout.strip() == "[]"


def test_creating_a_store_does_no_io_and_errors_name_the_store_not_the_password(caplog, driver):
    conninfo = "host=/nonexistent/socket/dir dbname=app user=me password=hunter2"
    store = PostgresHistoryStore(conninfo, "s-1", driver=driver)  # nothing happens yet
    assert "hunter2" not in repr(store) and "password=***" in repr(store)
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert call_store(store, "load") is None
    assert "s-1" in caplog.text and "/nonexistent/socket/dir" in caplog.text
    assert "hunter2" not in caplog.text
    strict = PostgresHistoryStore(conninfo, "s-1", driver=driver, fail_on_error=True)
    with pytest.raises(HistoryStoreError) as info:
        call_store(strict, "append", user("x"))
    assert "s-1" in str(info.value) and "hunter2" not in str(info.value)
    # A lock that cannot reach its store follows fail_on_error too (SPEC 16).
    with caplog.at_level(logging.WARNING, logger="lattice"):
        assert StoreLink(store, History()).hold_session(0.0).held is False
    with pytest.raises(HistoryStoreError, match="lock failed"):
        StoreLink(strict, History()).hold_session(0.0)


def test_a_missing_driver_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pg8000", None)
    monkeypatch.setitem(sys.modules, "pg8000.dbapi", None)
    store = PostgresHistoryStore("host=/x", "s", driver="pg8000")
    with pytest.raises(ModuleNotFoundError, match=r"agent-lattice\[postgres\]"):
        store.load()


# -- against the server -------------------------------------------------------------------


def test_the_table_is_created_if_missing_with_any_name(postgres_server, driver):
    table = f"t_{uuid.uuid4().hex[:8]}"
    with pg_connect(postgres_server.conninfo) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS other")
    for name in (table, f"other.{table}"):
        store = PostgresHistoryStore(postgres_server.conninfo, "s", table=name, driver=driver)
        store.append(user("hi"))
        assert store.load() == [user("hi")]
        assert store.list_sessions() == ["s"]
        store.delete()
        assert store.load() == [] and store.version() is None
    with pg_connect(postgres_server.conninfo) as conn:
        conn.execute(f"DROP TABLE {table}")  # dropped behind the store's back: made again
    store.table = table
    store.append(user("again"))
    assert store.load() == [user("again")]


def test_many_sessions_share_one_table_and_the_pool(postgres_server, driver):
    first = PostgresHistoryStore(postgres_server.conninfo, new_session(), driver=driver)
    second = first.with_session(new_session())
    first.append(user("one"))
    second.append(user("two"))
    assert first.load() == [user("one")] and second.load() == [user("two")]
    assert {first.session_id, second.session_id} <= set(first.list_sessions())


def test_a_connect_callable_is_used_instead_of_conninfo(postgres_server):
    psycopg = real_parts.require("psycopg")
    opened = []

    def connect():
        opened.append(1)
        return psycopg.connect(postgres_server.conninfo)  # not autocommit: the store sets it

    store = PostgresHistoryStore(None, new_session(), connect=connect)
    store.append(user("a"))
    store.replace([user("b"), assistant("c")])
    assert store.load() == [user("b"), assistant("c")]
    with store.lock():
        pass
    assert "connect=connect" in repr(store) and len(opened) >= 1
    store.close()


def terminate_all(conninfo):
    """``pg_terminate_backend`` every other connection to the test database, and wait until
    they are gone (the call only signals them)."""
    with pg_connect(conninfo) as conn:
        pids = [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")]
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 30
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                           (pids,)).fetchone()[0]:
            assert time.monotonic() < deadline, "backends outlived pg_terminate_backend"
            time.sleep(0.01)


@pytest.mark.parametrize("operation", ["append", "load", "version", "replace", "lock"])
def test_the_first_use_after_the_connection_is_killed_succeeds(postgres_server, driver,
                                                               operation):
    store = PostgresHistoryStore(postgres_server.conninfo, new_session(), driver=driver,
                                 fail_on_error=True)
    store.append(user("before"))  # a pooled connection now exists
    terminate_all(postgres_server.conninfo)
    if operation == "append":
        store.append(assistant("after"))
        assert store.load() == [user("before"), assistant("after")]
    elif operation == "load":
        assert store.load() == [user("before")]
    elif operation == "version":
        assert isinstance(store.version(), int)
    elif operation == "replace":
        store.replace([user("new")])
        assert store.load() == [user("new")]
    else:
        with store.lock():
            store.append(assistant("locked"))


def test_a_server_restart_mid_run_fails_or_is_swallowed_then_reconnects(postgres_server,
                                                                         driver, caplog):
    lenient = PostgresHistoryStore(postgres_server.conninfo, new_session(), driver=driver)
    strict = PostgresHistoryStore(postgres_server.conninfo, new_session(), driver=driver,
                                  fail_on_error=True)
    stop = threading.Event()
    outcomes = {"lenient": [], "strict": []}

    def writer(store, name):
        i = 0
        while not stop.is_set():
            try:
                call_store(store, "append", user(f"{name} {i}"))
                outcomes[name].append("ok")
            except HistoryStoreError:
                outcomes[name].append("raised")
            i += 1

    with caplog.at_level(logging.WARNING, logger="lattice"):
        threads = [threading.Thread(target=writer, args=(s, n))
                   for s, n in ((lenient, "lenient"), (strict, "strict"))]
        for t in threads:
            t.start()
        while len(outcomes["lenient"]) < 20 or len(outcomes["strict"]) < 20:
            threads[0].join(0.01)
        postgres_server.restart()
        stop.set()
        for t in threads:
            t.join(60)
    assert "raised" not in outcomes["lenient"]  # swallowed (and logged) without fail_on_error
    # After the restart every store works again at its first use.
    for store in (lenient, strict):
        store.append(assistant("after the restart"))
        assert store.load()[-1] == assistant("after the restart")
        with store.lock():
            pass


def test_a_lock_holder_whose_connection_dies_frees_the_session(postgres_server, driver):
    store = PostgresHistoryStore(postgres_server.conninfo, new_session(), driver=driver)
    holder = store.lock()
    holder.__enter__()
    terminate_all(postgres_server.conninfo)
    with store.lock(wait_s=10):
        pass
    with pytest.raises(Exception):  # noqa: B017 - the unlock reports the lost connection
        holder.__exit__(None, None, None)


def test_an_agent_resumes_from_postgres(postgres_server, driver):
    session = new_session()

    def model(request):
        return f"{len(request.messages)} messages so far"

    def agent():
        return Agent(model="m", model_client=FunctionModelClient(model),
                     history_store=PostgresHistoryStore(postgres_server.conninfo, session,
                                                        driver=driver))

    agent().prompt("hello")
    assert agent().prompt("again").result == "3 messages so far"
    assert [m["role"] for m in agent().get_history()] == ["user", "assistant"] * 2
