"""What validation reports: one ``ErrorDetail`` per problem, gathered in a ``ValidationError``.

Messages are written for a reader (often a language model) that must fix the instance:
each names the place with a JSONPath-like path (``$.items[2].name``) and says what is
wrong in plain words, quoting the offending value. ``schema_path`` says which keyword
found it, as the keywords and keys followed from the schema root (through ``$ref`` too,
as JSON Schema's ``keywordLocation`` does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Union

from ..errors import LatticeError, SchemaError
from ._uri import pointer_segments

__all__ = ["ErrorDetail", "ValidationError", "format_path", "relocate", "schema_error"]

PathItem = Union[str, int]
_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def format_path(path: Sequence[PathItem]) -> str:
    """``$`` for the root, else ``$.items[2].name`` (odd keys as ``$['a b']``)."""
    parts = ["$"]
    for item in path:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif _IDENTIFIER.match(item):
            parts.append(f".{item}")
        else:
            escaped = item.replace("\\", "\\\\").replace("'", "\\'")
            parts.append(f"['{escaped}']")
    return "".join(parts)


class ErrorDetail:
    """One problem: where it is (``path``, keys and indices), what it is (``message``), and
    which keyword found it (``schema_path``, keywords and keys from the schema root, e.g.
    ``["properties", "n", "type"]``)."""

    __slots__ = ("path", "message", "keyword", "schema_path")

    def __init__(self, path: Sequence[PathItem], message: str, keyword: str = "",
                 schema_path: Sequence[PathItem] = ()) -> None:
        self.path: list[PathItem] = list(path)
        self.message = message
        self.keyword = keyword
        self.schema_path: list[PathItem] = list(schema_path)

    @property
    def json_path(self) -> str:
        """The path as text, e.g. ``$.items[2].name``."""
        return format_path(self.path)

    def __str__(self) -> str:
        return f"{format_path(self.path)}: {self.message}"

    def __repr__(self) -> str:
        return (f"ErrorDetail(path={self.path!r}, message={self.message!r}, "
                f"schema_path={self.schema_path!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ErrorDetail):
            return NotImplemented
        return (self.path, self.message) == (other.path, other.message)

    def __hash__(self) -> int:
        return hash((tuple(self.path), self.message))


class ValidationError(LatticeError, ValueError):
    """An instance does not match its schema; ``.errors`` lists every problem found."""

    def __init__(self, errors: Sequence[ErrorDetail]) -> None:
        self.errors: list[ErrorDetail] = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors) or "instance is invalid")

    @property
    def message(self) -> str:
        """All problems, one ``path: message`` per line (same as ``str()``)."""
        return str(self)


def schema_error(where: str, reason: str, documents: Mapping[str, Any]) -> SchemaError:
    """``invalid schema at <where>: <reason>``; ``.path`` is the JSON pointer in ``where``,
    with indices as ints where ``documents[<where's URI>]`` has an array."""
    uri, _, fragment = where.partition("#")  # built by the compiler, not percent-encoded
    node = documents.get(uri)
    path: list[PathItem] = []
    for segment in pointer_segments(fragment) if fragment.startswith("/") else ():
        if isinstance(node, list) and segment.isdigit():
            path.append(int(segment))
            node = node[int(segment)] if int(segment) < len(node) else None
        else:
            path.append(segment)
            node = node.get(segment) if isinstance(node, dict) else None
    return SchemaError(f"invalid schema at {where}: {reason}", path=path, reason=reason)


def relocate(error: SchemaError, prefix: Sequence[PathItem], name: str = "schema") -> SchemaError:
    """``error`` as seen from the subschema at ``prefix`` (e.g. a wrapper's path taken off):
    ``invalid <name> at #/rest: <reason>``. An error outside ``prefix`` keeps its path."""
    inside = list(error.path[: len(prefix)]) == list(prefix)
    path = error.path[len(prefix):] if inside else error.path
    pointer = "".join(f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in path)
    return SchemaError(f"invalid {name} at #{pointer}: {error.reason}", path=path,
                       reason=error.reason)
