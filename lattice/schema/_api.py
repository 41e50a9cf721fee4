"""The validating half of the public surface: ``compile``, ``validate``, ``is_valid``.

Compiled validators are cached twice: by the schema object's identity (the hot path, no
hashing of the schema at all; the cache holds the object so its ``id`` cannot be reused),
and by canonical JSON text, so an equal schema rebuilt per call (a deep copy, a literal in
a loop) is still compiled only once. Schemas are treated as immutable once compiled.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

from ..errors import SchemaError
from ._compiler import Compiler
from ._errors import ErrorDetail, ValidationError
from ._json import too_deep
from ._registry import DRAFT_7, DRAFT_2020, Registry, dialect_of
from ._vocabulary import VOCABULARY

__all__ = ["Validator", "compile", "validate", "is_valid"]

_DRAFTS = (DRAFT_2020, DRAFT_7)
_CACHE_LIMIT = 512
_by_id: dict[tuple[int, Optional[str], bool], tuple[Any, Validator]] = {}
_by_text: dict[tuple[str, Optional[str], bool], Validator] = {}
_lock = threading.Lock()


def _check_draft(draft: Optional[str]) -> Optional[str]:
    if draft is None or draft in _DRAFTS:
        return draft
    raise ValueError(f"unsupported draft {draft!r}: use '2020-12', '7' or None")


class Validator:
    """A schema compiled once, for validating many instances.

    ``is_valid(instance)`` is the compiled fast path itself (no wrapper call in between),
    unless the schema is recursive: then a wrapper turns a ``RecursionError`` on an
    over-deep instance into ``False``. ``validate(instance)`` raises ``ValidationError``
    listing every problem.
    """

    is_valid: Callable[[Any], bool]

    def __init__(
        self, schema: Any, draft: Optional[str] = None, *, format_checker: bool = False
    ) -> None:
        draft = _check_draft(draft)
        if draft is None:
            declared = schema.get("$schema") if isinstance(schema, dict) else None
            draft = (dialect_of(declared) if isinstance(declared, str) else None) or DRAFT_2020
        self.schema = schema
        self.draft: str = draft
        self.format_checker = bool(format_checker)
        registry = Registry()
        try:
            root = registry.add(schema, draft)
            compiler = Compiler(registry, VOCABULARY, self.format_checker)
            self._root = compiler.root(root)
        except RecursionError:
            reason = f"it {too_deep(schema, 'compile')}"
            raise SchemaError(f"invalid schema at #: {reason}", reason=reason) from None
        # Only a schema that follows the instance down without bound (a recursive $ref, or
        # uniqueItems comparing whole items) can exhaust the stack on a deep instance; the
        # others keep the compiled fast path itself, with no wrapper call in between.
        self.is_valid = _guarded(self._root.ok) if compiler.unbounded else self._root.ok

    def errors(self, instance: Any) -> list[ErrorDetail]:
        """Every problem with ``instance`` (empty when it is valid)."""
        found: list[ErrorDetail] = []
        try:
            if self._root.ok(instance):
                return []
            self._root.errs(instance, (), (), found)
        except RecursionError:
            return [ErrorDetail([], too_deep(instance), "depth")]
        return found or [ErrorDetail([], "instance does not match the schema")]

    def validate(self, instance: Any) -> None:
        """Raise ``ValidationError`` (with every problem) unless ``instance`` is valid."""
        if not self.is_valid(instance):
            raise ValidationError(self.errors(instance))

    def __repr__(self) -> str:
        text = json.dumps(self.schema, default=repr)[:60]
        return f"Validator(draft={self.draft!r}, schema={text})"


def _guarded(ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``ok``, with an instance too deep for the stack counted as invalid (``errors`` says so)."""

    def is_valid(instance: Any) -> bool:
        try:
            return ok(instance)
        except RecursionError:
            return False

    return is_valid


def compile(schema: Any, draft: Optional[str] = None, *, format_checker: bool = False) -> Validator:
    """A ``Validator`` for ``schema``, compiled once and cached.

    Args:
        schema: a JSON Schema (dict or bool).
        draft: ``"2020-12"``, ``"7"`` or ``None`` (the schema's ``$schema``, else 2020-12).
        format_checker: assert ``format`` (date-time, email, uri, ...) instead of only
            annotating with it.

    Raises:
        SchemaError: the schema itself is invalid.
        ValueError: an unknown ``draft``.
    """
    draft = _check_draft(draft)
    flag = bool(format_checker)
    hit = _by_id.get((id(schema), draft, flag))
    if hit is not None and hit[0] is schema:
        return hit[1]
    try:
        text: Optional[str] = json.dumps(schema, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = None  # not plain JSON: cache by identity only
    validator = _by_text.get((text, draft, flag)) if text is not None else None
    if validator is None:
        validator = Validator(schema, draft, format_checker=flag)
    with _lock:
        if len(_by_id) >= _CACHE_LIMIT:
            _by_id.clear()
        if len(_by_text) >= _CACHE_LIMIT:
            _by_text.clear()
        _by_id[(id(schema), draft, flag)] = (schema, validator)
        if text is not None:
            _by_text[(text, draft, flag)] = validator
    return validator


def validate(instance: Any, schema: Any, draft: Optional[str] = None, *,
             format_checker: bool = False) -> None:
    """Raise ``ValidationError`` listing every problem unless ``instance`` matches ``schema``."""
    compile(schema, draft, format_checker=format_checker).validate(instance)


def is_valid(instance: Any, schema: Any, draft: Optional[str] = None, *,
             format_checker: bool = False) -> bool:
    """Whether ``instance`` matches ``schema`` (``SchemaError`` if the schema is invalid)."""
    return compile(schema, draft, format_checker=format_checker).is_valid(instance)
