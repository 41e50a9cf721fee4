"""What a query reports, and to whom: the observer seam (``observer.py``) and
OpenTelemetry tracing (``tracing.py``; what it records, in the GenAI conventions' terms,
``genai.py``). ``opentelemetry`` is imported only when a tracing observer is made.
"""

from __future__ import annotations

from .observer import Observer, ObserverGroup, QueryDetails, query_details

__all__ = ["Observer", "ObserverGroup", "QueryDetails", "query_details"]
