"""Deprecated path (0.4): prompt-caching marks moved to ``lattice.query.caching``.

``lattice.caching.mark_cache_breakpoints`` was documented in 0.3; it keeps working here
for 0.4 with a ``DeprecationWarning`` on each use of a name (docs/upgrading.md), and
goes away in 0.5. Nothing is imported until a name is asked for.
"""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = ("mark_cache_breakpoints", "count_cache_breakpoints", "fit_cache_breakpoints",
          "MAX_BREAKPOINTS")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'lattice.caching' has no attribute {name!r}")
    warnings.warn(f"lattice.caching.{name} moved to lattice.query.caching.{name}; the old "
                  "path goes away in 0.5 (docs/upgrading.md)", DeprecationWarning, stacklevel=2)
    from .query import caching

    return getattr(caching, name)
