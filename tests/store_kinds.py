"""The stores the shared store suite runs against, made the same way in the test process and
in the child processes it starts (``python -c`` with this folder on ``sys.path``).

A store is named by ``(kind, where, session)``: ``where`` is a folder for the file stores and
a conninfo for PostgreSQL. ``raw_insert`` writes entries behind the store's back, as a
hand edit or another program would.
"""

import json
import os
import subprocess
import sys
import textwrap

import lattice
from lattice.stores import (
    JsonlHistoryStore,
    MemoryHistoryStore,
    PostgresHistoryStore,
    SqliteHistoryStore,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(lattice.__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))

FILE_KINDS = ("jsonl", "sqlite")
PG_KINDS = ("postgres-psycopg", "postgres-pg8000")
PROCESS_KINDS = FILE_KINDS + PG_KINDS  # every kind shared between processes


def make_store(kind, where, session, **options):
    if kind == "jsonl":
        return JsonlHistoryStore(os.path.join(where, f"{session}.jsonl"), **options)
    if kind == "sqlite":
        return SqliteHistoryStore(os.path.join(where, "h.db"), session, **options)
    if kind.startswith("postgres-"):
        return PostgresHistoryStore(where, session, driver=kind.split("-", 1)[1], **options)
    raise ValueError(kind)


def raw_insert(kind, where, session, texts):
    """Store each of ``texts`` (raw JSON text, possibly not a message) at the session's end."""
    if kind == "jsonl":
        with open(os.path.join(where, f"{session}.jsonl"), "ab") as f:
            for text in texts:
                f.write(text.encode() + b"\n")
    elif kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(os.path.join(where, "h.db"))
        for text in texts:
            db.execute("INSERT INTO lattice_history SELECT ?, COALESCE(MAX(seq), 0) + 1, ? "
                       "FROM lattice_history WHERE session_id = ?", (session, text, session))
        db.commit()
        db.close()
    else:
        with pg_connect(where) as conn:
            for text in texts:
                conn.execute("INSERT INTO lattice_messages (session_id, message) VALUES (%s, %s)",
                             (session, text))


def pg_connect(conninfo):
    import psycopg

    return psycopg.connect(conninfo, autocommit=True)


def child(code, *args, **popen):
    """Start ``python -c code args...`` with lattice and this folder importable."""
    path = os.pathsep.join([ROOT, TESTS, os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=dict(os.environ, PYTHONPATH=path), stdout=subprocess.PIPE, text=True, **popen)


def memory_store(messages=None):
    return MemoryHistoryStore(messages)


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def dumps(value):
    return json.dumps(value)


class Backend:
    """Where one test's stores live; ``store()`` makes a new store object on it each time
    (as a new Agent would), except for memory, which is one object."""

    def __init__(self, kind, where):
        import uuid

        self.kind = kind
        self.where = where
        self.session = f"s-{uuid.uuid4().hex[:12]}"
        self._memory = MemoryHistoryStore() if kind == "memory" else None
        self.made = []

    def store(self, session=None, **options):
        if self._memory is not None:
            return self._memory
        made = make_store(self.kind, self.where, session or self.session, **options)
        self.made.append(made)
        return made

    def close(self):
        for store in self.made:
            close = getattr(store, "close", None)
            if close is not None:
                close()


def backend_for(request, tmp_path):
    """A ``Backend`` for the fixture param ``request.param`` (a generator: yield from it)."""
    import pytest

    kind = request.param
    if kind.startswith("postgres-"):
        pytest.importorskip(kind.split("-", 1)[1])
        where = request.getfixturevalue("postgres_server").conninfo
    else:
        where = str(tmp_path)
    made = Backend(kind, where)
    yield made
    made.close()
