"""Query worker threads that ran on after their query ended (SPEC 16a): counted, and warned
about past ten.

A worker that ignores its query's end (a tool or a model client that does not watch its
signal, or code holding the GIL) cannot be stopped: it runs on as a daemon and keeps its
resources. ``QueryRace.release`` looks at a worker still running ``ABANDONED_AFTER_S`` after
the end and counts it here until it exits.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["ABANDONED_AFTER_S", "ABANDONED_WARN_EVERY", "Abandoned", "REGISTRY",
           "abandoned_workers"]

log = logging.getLogger("lattice")

ABANDONED_AFTER_S = 1.0  # a worker still running this long after its query ended ignored it
ABANDONED_WARN_EVERY = 10


class Abandoned:
    """The process's worker threads that ignored their query's end. Past 10 alive, one
    WARNING, then one per 10 more."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.alive = 0
        self.warned = 0  # the count at the last warning; 0 again once all have finished

    def add(self) -> None:
        with self.lock:
            self.alive += 1
            alive = self.alive
            warn = alive > ABANDONED_WARN_EVERY and alive >= self.warned + ABANDONED_WARN_EVERY
            if warn:
                self.warned = alive
        if warn:
            log.warning("%d lattice worker threads are still running after their queries "
                        "ended (a tool or model client that ignores its signal, or code "
                        "holding the GIL); they cannot be stopped and keep their resources",
                        alive)

    def remove(self) -> None:
        with self.lock:
            self.alive -= 1
            if self.alive == 0:
                self.warned = 0


REGISTRY = Abandoned()


def abandoned_workers() -> int:
    """How many query worker threads are running on after their query ended."""
    return REGISTRY.alive
