"""Type hints that ``typing.get_type_hints`` cannot resolve on its own.

``get_type_hints`` evaluates string annotations in the namespace of the class's module,
found through ``sys.modules[cls.__module__]``. Two common cases defeat it:

* a class created by ``exec`` in a fresh namespace (how tests/examples/test_readme.py runs the
  README, how some notebook and plugin runners work), whose module is not in
  ``sys.modules``: Python 3.9 raises ``KeyError`` with the module's name, later versions
  evaluate in an empty namespace, so any string annotation is a ``NameError``;
* string annotations (``from __future__ import annotations``, or quoted) naming a class
  local to the function that defined this one.

When it fails, hints are evaluated again in a namespace assembled from what can be
reached: the classes of the MRO by name; the namespace a class body ran in, as seen by
the functions it defines (``__globals__``) and by the frames on the stack that run in
that module (the ``exec``-ed code calling us); the module when it is loaded; and, nearest,
the locals of the frame that defined the class or function (it is still on the stack
when a decorator or the code right after the definition asks). Builtins come with
``eval``. Nothing here runs unless ``get_type_hints`` failed first.
"""

from __future__ import annotations

import sys
import typing
from types import FrameType
from typing import Any, Callable, Optional

__all__ = ["class_hints", "function_namespace"]

_FRAMES = 200  # how far up the stack to look


def _frames() -> list[FrameType]:
    getframe: Optional[Callable[[int], FrameType]] = getattr(sys, "_getframe", None)
    found: list[FrameType] = []
    frame = getframe(2) if getframe is not None else None
    while frame is not None and len(found) < _FRAMES:
        found.append(frame)
        frame = frame.f_back
    return found


def _defining_function(obj: Any) -> str:
    """``f`` for ``f.<locals>.Name``; empty for an object defined at module level."""
    qualname = getattr(obj, "__qualname__", "")
    head, sep, _ = qualname.rpartition(".<locals>.")
    return head.rpartition(".")[2] if sep else ""


def _layers(obj: Any, module_name: str) -> list[dict[str, Any]]:
    """Namespaces to evaluate ``obj``'s annotations in, lowest precedence first."""
    outer: list[dict[str, Any]] = []
    local: list[dict[str, Any]] = []
    definer = _defining_function(obj)
    for frame in reversed(_frames()):
        if frame.f_globals.get("__name__") != module_name:
            continue
        outer.append(frame.f_globals)
        if definer and frame.f_code.co_name == definer:
            local.append(dict(frame.f_locals))
    module = sys.modules.get(module_name)
    loaded = [vars(module)] if module is not None else []
    return outer + loaded + local


def _method_globals(tp: type) -> list[dict[str, Any]]:
    found = []
    for base in reversed(tp.__mro__[:-1]):
        for value in vars(base).values():
            fn = getattr(value, "__func__", value)  # classmethod, staticmethod
            namespace = getattr(fn, "__globals__", None)
            if isinstance(namespace, dict) and namespace.get("__name__") == base.__module__:
                found.append(namespace)
    return found


def class_hints(tp: type, *, include_extras: bool = True) -> dict[str, Any]:
    """``get_type_hints(tp, include_extras=...)``, with the fallback described above."""
    try:
        return typing.get_type_hints(tp, include_extras=include_extras)
    except RecursionError:
        raise
    except Exception:  # NameError, or KeyError on 3.9 for a module not in sys.modules
        pass
    namespace: dict[str, Any] = {base.__name__: base for base in reversed(tp.__mro__)}
    for layer in _method_globals(tp) + _layers(tp, tp.__module__):
        namespace.update(layer)
    return typing.get_type_hints(tp, globalns=namespace, include_extras=include_extras)


def function_namespace(fn: Callable[..., Any]) -> dict[str, Any]:
    """Where a function's string annotations are evaluated when ``get_type_hints`` failed:
    its globals, and the locals of the frame that defined it if that is still running."""
    namespace = dict(getattr(fn, "__globals__", {}))
    for layer in _layers(fn, namespace.get("__name__", getattr(fn, "__module__", ""))):
        namespace.update(layer)
    return namespace
