"""``typing.get_type_hints`` for classes, the same on every supported Python.

Python 3.9 looks each base class's module up with ``sys.modules[base.__module__]``, so a
class whose module is not registered there (one defined by ``exec`` with its own
``__name__``, as doc and notebook runners do) raises ``KeyError`` instead of resolving.
Python 3.10+ uses ``sys.modules.get`` and falls back to empty globals; this does the same.
"""

from __future__ import annotations

import sys
import typing
from typing import Any

__all__ = ["class_hints"]


def class_hints(tp: type, *, include_extras: bool = True) -> dict[str, Any]:
    """The resolved annotations of ``tp`` and its bases (``get_type_hints`` semantics)."""
    try:
        return typing.get_type_hints(tp, include_extras=include_extras)
    except KeyError:
        if sys.version_info >= (3, 10) or all(b.__module__ in sys.modules for b in tp.__mro__):
            raise
    hints: dict[str, Any] = {}
    for base in reversed(tp.__mro__):
        annotations = base.__dict__.get("__annotations__", {})
        if not annotations:
            continue
        module = sys.modules.get(base.__module__)
        # A stand-in class carrying only this base's annotations, resolved against its
        # module's globals (or none), the way Python 3.10+ resolves them.
        holder = type(base.__name__, (), {"__annotations__": dict(annotations)})
        globalns = dict(vars(module)) if module is not None else {}
        hints.update(typing.get_type_hints(holder, globalns, include_extras=include_extras))
    return hints
