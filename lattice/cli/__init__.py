"""The ``lattice`` command (``main.py`` parses the options and builds the Agent;
``session.py`` the turns and the chat; ``openai.py`` and ``cloud.py`` the providers that
need more than a key)."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
