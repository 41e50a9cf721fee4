"""``requests`` as the HTTP clients' annotations name it, for ``typing.get_type_hints``.

``import lattice`` never imports ``requests`` (issue 28): it is imported when a request is
made. The clients' annotations say ``requests.Session``; at run time that name resolves
here, to ``Any``, so ``get_type_hints`` works on every public class (issue 33); the type
checker reads the real module.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["requests"]

requests = SimpleNamespace(Session=Any, Response=Any)
