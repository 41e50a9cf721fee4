"""Durable runs (SPEC 17-19): a query given a ``run_id`` runs at most once to its end.

- ``runs.py``: where a run is recorded and resumed (``DurableRun``: a new run, a replay,
  a resume, another query's run superseded);
- ``record.py``: the run record, typed and versioned, as the store keeps it;
- ``journal.py``: the call journal the loop writes through;
- ``follow.py``: ``follow()``, a session's messages and a run's end, from anywhere.

Words: a *run* is what a ``run_id`` names (a query that runs at most once to its end);
a query *ends* one way (``query/endings.py``), and a run ends when its query does.

Nothing is imported here: each module is imported by its own path.
"""
