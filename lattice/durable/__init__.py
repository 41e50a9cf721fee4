"""Durable runs (SPEC 17-19): a query given a ``run_id`` runs at most once to its end.

- ``record.py``: the run record as the store keeps it, and the call journal;
- ``runs.py``: what a call with a run id does (a new run, a replay, a resume);
- ``follow.py``: ``follow()``, a session's messages and a run's end, from anywhere.

Nothing is imported here: each module is imported by its own path.
"""
