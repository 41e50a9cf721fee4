"""The conversation one ``Agent`` holds: its messages and the store behind them
(``history.py``), and what a query takes from it to start and gives back at its end
(``conversation.py``: the one-query guard, the session lock, loading the store).

Nothing is imported here: each module is imported by its own path.
"""
