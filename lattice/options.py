"""Option checkers: every option check lives here, so a bad value fails the same way
(``ValueError`` naming the option and the value) from ``Agent(...)``, ``query(...)`` and
``prompt(...)``, and from the other objects that take options (``AutoCompact``, ``Tool``,
the tracing observer, ``follow()``). The ground floor: it imports nothing of lattice.
"""

from __future__ import annotations

import enum
from typing import Any, Dict, List, Optional

__all__ = ["Unset", "UNSET", "positive_int", "optional_positive_int",
           "non_negative_int", "optional_non_negative_int", "non_negative_number",
           "check_bool", "check_callable", "check_flags", "check_hooks", "check_model",
           "check_system", "check_extra", "check_history_store", "check_one_of",
           "check_instances"]


class Unset(enum.Enum):
    """"Not given" for a per-query override whose None means "no limit" (a one-member Enum,
    so a type checker knows ``UNSET`` is its only value)."""

    UNSET = "UNSET"


UNSET = Unset.UNSET


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def optional_positive_int(name: str, value: Any) -> Optional[int]:
    return None if value is None else positive_int(name, value)


def non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def optional_non_negative_int(name: str, value: Any) -> Optional[int]:
    return None if value is None else non_negative_int(name, value)


def non_negative_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return value


def check_callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ValueError(f"{name} must be callable, got {value!r}")
    return value


def check_flags(**flags: Any) -> None:
    """Each of ``flags`` is a bool."""
    for name, value in flags.items():
        check_bool(name, value)


def check_hooks(**hooks: Any) -> None:
    """Each of ``hooks`` is a callable or None."""
    for name, value in hooks.items():
        check_callable(name, value)


def check_model(model: Any, model_client: Any) -> Optional[str]:
    """``model``: a non-empty str, required unless a ``model_client`` may ignore it."""
    if model is not None and (not isinstance(model, str) or not model):
        raise ValueError(f"model must be a non-empty str, got {model!r}")
    if model is None and model_client is None:
        raise ValueError("model is required (or pass a model_client that ignores it)")
    return model


def check_name(name: Any) -> Optional[str]:
    """The Agent's ``name``: None, or a non-empty str without control characters."""
    if name is not None and (not isinstance(name, str) or not name.strip()
                             or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        raise ValueError(f"name must be a non-empty str without control characters or "
                         f"None, got {name!r}")
    return name


def check_system(system: Any) -> Any:
    if system is not None and not isinstance(system, (str, list)):
        raise ValueError(f"system must be a str or a list of content blocks, got {system!r}")
    return system


def check_extra(extra: Any) -> Dict[str, Any]:
    """``extra`` request body fields, as a new dict."""
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"extra must be a dict of request body fields, got {extra!r}")
    return dict(extra or {})


def check_history_store(store: Any) -> Any:
    if store is not None and not all(
            callable(getattr(store, m, None)) for m in ("load", "append", "replace")):
        raise ValueError(f"history_store must have load(), append() and replace(), got {store!r}")
    return store


def check_one_of(**options: Any) -> None:
    """At most one of ``options`` is set (not None)."""
    given = [name for name, value in options.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"set {' or '.join(options)}, not both")


def check_instances(name: str, values: Any, cls: type, what: str) -> List[Any]:
    """``values`` (an iterable or None) as a list of ``cls`` instances."""
    made = list(values or ())
    if not all(isinstance(v, cls) for v in made):
        raise ValueError(f"{name} must be {what}, got {values!r}")
    return made
