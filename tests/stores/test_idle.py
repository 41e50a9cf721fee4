"""``lattice.stores.idle.IdlePool``: the idle connections of the SQLite and PostgreSQL stores."""

from __future__ import annotations

import os

import pytest

from lattice.stores.idle import MAX_IDLE, IdlePool


class Conn:
    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False
        self.dead = False
        self.busy = False

    def close(self) -> None:
        self.closed = True


def pool(**options: object) -> tuple[IdlePool[Conn], list[Conn]]:
    made: list[Conn] = []

    def connect() -> Conn:
        made.append(Conn(len(made)))
        return made[-1]

    return IdlePool(connect, **options), made  # type: ignore[arg-type]


def test_a_connection_given_back_is_reused() -> None:
    p, made = pool()
    with p.borrow() as first:
        pass
    loan = p.borrow()
    assert loan.conn is first and loan.reused and len(made) == 1 and not first.closed


def test_an_error_closes_the_connection_instead_of_keeping_it() -> None:
    p, made = pool()
    with pytest.raises(RuntimeError), p.borrow() as conn:
        raise RuntimeError("statement failed")
    assert conn.closed
    assert p.borrow().conn is not conn


def test_reusable_and_alive_are_asked() -> None:
    p, made = pool(reusable=lambda c: not c.busy, alive=lambda c: not c.dead)
    with p.borrow() as busy:
        busy.busy = True
    assert busy.closed  # not reusable: closed when given back
    with p.borrow() as later:
        pass
    later.dead = True
    fresh = p.borrow()
    assert later.closed and fresh.conn is not later and not fresh.reused


def test_at_most_max_idle_are_kept() -> None:
    p, made = pool()
    loans = [p.borrow() for _ in range(MAX_IDLE + 2)]
    for loan in loans:
        p.give_back(loan)
    assert sum(c.closed for c in made) == 2


def test_close_closes_idle_now_and_loans_when_given_back() -> None:
    p, made = pool()
    with p.borrow():
        pass
    out = p.borrow()
    idle = p.borrow()
    p.give_back(idle)
    p.close()
    assert idle.conn.closed and not out.conn.closed
    p.give_back(out)
    assert out.conn.closed
    assert not p.borrow().reused  # the pool still works after close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_touches_the_parent_connections() -> None:
    p, made = pool()
    with p.borrow() as parents:
        pass
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it got, then leave without cleanup
        loan = p.borrow()
        p.close()
        os.write(write, f"{loan.reused} {parents.closed}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        reported = fh.read()
    os.waitpid(pid, 0)
    assert reported == "False False"
    assert p.borrow().conn is parents  # the parent's pool is as it was
