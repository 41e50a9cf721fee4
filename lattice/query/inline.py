"""A query's loop on the caller's own thread, for a model client that can be aborted from
another thread (#39): at most one thread hand-off per tool turn instead of two, and none
when nothing can end the query during a tool batch.

In lockstep (SPEC 5) the loop stops at every history message it yields until the consumer
asks for the next one. With the loop in a worker, each stop is a round trip between two
threads: two a tool turn (the reply, then the tool results), each a wake-up of a sleeping
thread, which costs more than the rest of the turn on a machine whose idle cores are slow
to wake, and more again among many busy threads (each wake-up a GIL hand-over). Run on the
caller's thread as a generator (``Loop.inline``), the loop yields the reply without a
hand-off.

The tool batch runs where an abort can leave it. Only the caller's signal (or a parent's,
for a subagent) can end a query while its batch runs: an interrupt waits for the batch
(SPEC 5), a request deadline bounds model requests only, and the consumer cannot close the
generator while it is inside it. So (``tools_need_a_thread``):

- with such a signal, each batch goes to another thread (``ToolRunner``, one per query,
  made at its first batch), which an abort leaves where it is: one round trip a tool turn;
- without one, the batch runs on the caller's thread too, as ``prompt()``'s worker runs
  it: no hand-off at all. ``prompt()`` runs inline only then (with a signal its worker
  costs one hand-off a query, fewer than one a tool turn).

That is only done where both of SPEC 5's promises still hold with the model call on the
caller's thread (``runs_inline``):

- the client says it returns soon after its request's signal fires, from any thread
  (``abortable``: the built-in HTTP clients close their connection from the thread that
  fires, docs/model-clients.md), so an abort or a deadline still ends the query within
  about 100 ms; a client that does not say so (one that may never return, or ignores its
  signal) keeps the worker;
- no other code of the caller's runs in the loop where an abort could not leave it (an
  ``on_model_request`` hook, observers), and no slow store write (a history store: the
  caller never waits for one, SPEC 10a), no polled ``threading.Event`` signal (nothing
  would call back), no stream events (they are yielded during the model call), no
  compaction (it yields mid-turn) and no resumed batch;
- the caller is not the main thread: Ctrl-C (a ``KeyboardInterrupt``) lands only there,
  at any bytecode, and must never find the loop's own writes half done.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Tuple

from .handoff import Stopped

if TYPE_CHECKING:  # pragma: no cover
    from ..conversation.store_link import StoreLink
    from .race import QueryRace
    from .settings import QuerySettings

__all__ = ["runs_inline", "tools_need_a_thread", "ToolRunner"]


def tools_need_a_thread(race: QueryRace, parentage: Optional[Any]) -> bool:
    """Whether something can end this query while a tool batch runs: the caller's signal,
    or a parent's (a subagent's, relayed). Then a batch must run where an abort can leave
    it; otherwise it may run on the caller's thread (the module docstring)."""
    return race.user_signal is not None or parentage is not None


def runs_inline(race: QueryRace, settings: QuerySettings, link: StoreLink,
                resume: Optional[Any], tools_threaded: bool) -> bool:
    """Whether this query's loop may run on the caller's thread (the module docstring);
    ``tools_threaded``: ``tools_need_a_thread``'s answer for it."""
    return ((race.lockstep or not tools_threaded)
            and getattr(settings.client, "abortable", False) is True
            and not race.poll and link.store is None and resume is None
            and settings.on_model_request is None and not settings.observers
            and not settings.include_partial_messages and settings.auto_compact is None
            and threading.current_thread() is not threading.main_thread())


class ToolRunner:
    """Runs an inline query's tool batches on one daemon thread, made at the first batch;
    the consumer waits for each batch, or for the end of the query.

    The two sides use the run's doorbells (lattice/query/handoff.py): the runner sleeps on
    ``_worker`` (rung for a batch, and by every end), the consumer on ``_consumer`` (rung
    when a batch is done, and by every end). One side writes ``job`` and the other takes
    it, then the reverse for ``outcome``: each a single attribute store or load (atomic),
    made before the ring the other side wakes on, so no lock is needed (a ring that finds
    nothing new costs one more look). While a batch runs the run counts as ``working``
    (``worker_enter``), so a tool still running after the end is looked at again
    (lattice/query/abandoned.py)."""

    __slots__ = ("run", "job", "outcome", "thread")

    def __init__(self, run: QueryRace) -> None:
        self.run = run
        self.job: Optional[Callable[[], Any]] = None
        self.outcome: Optional[Tuple[bool, Any]] = None
        self.thread: Optional[threading.Thread] = None

    def __call__(self, job: Callable[[], Any]) -> Any:
        """``job()`` on the runner's thread: its value, or its exception raised here;
        ``Stopped`` as soon as the query ends (the job is left where it is)."""
        run = self.run
        if run.ended is not None:
            raise Stopped
        self.outcome = None
        self.job = job
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="lattice-tools",
                                           daemon=True)
            self.thread.start()
        else:
            run._worker.ring()
        bell = run._consumer
        while True:
            outcome = self.outcome
            if outcome is not None:
                break
            if run.ended is not None:
                raise Stopped
            bell.wait()
        self.outcome = None
        if outcome[0]:
            return outcome[1]
        raise outcome[1]

    def _serve(self) -> None:
        run = self.run
        bell = run._worker
        while True:
            job = self.job
            if job is None:
                if run.ended is not None:
                    return
                bell.wait()
                continue
            self.job = None
            run.working = True  # (worker_enter)
            try:
                outcome: Tuple[bool, Any] = (True, job())
            except BaseException as exc:  # noqa: B036 - raised on the consumer's thread
                outcome = (False, exc)
            finally:
                run.worker_exit()
            self.outcome = outcome
            run._consumer.ring()
