"""A query, from its start to its end.

- ``query.py``: where a query starts and ends, on the caller's side (``Query``: the guard,
  the session lock, approvals given back, durable runs, the ``ResultMessage``);
- ``loop.py``: the turns, run by the worker thread (``Loop``: ask the model, then end or run
  the tools); ``model_call.py`` one model request; ``caching.py`` its cache breakpoints;
  ``output.py`` the structured-output contract;
- ``race.py``, ``handoff.py``, ``abandoned.py``: the worker thread, raced by the caller;
- ``settings.py`` what a query runs with; ``endings.py`` how it ends.

Nothing is imported here: each module is imported by its own path, so that importing
one (``settings``) never loads the rest.
"""
