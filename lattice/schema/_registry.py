"""Where every (sub)schema lives: base URIs, ``$id`` resources, anchors, and ``$ref`` lookup.

A ``Registry`` indexes the documents of one compiled schema. Only keywords that hold
subschemas are walked, so an ``$id`` inside ``enum`` or an unknown keyword is not an
identifier. The official meta-schemas are bundled and indexed only when a ``$ref``
names one; nothing is ever fetched.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple, Optional

from ._uri import pointer_segments, resolve_uri, split_fragment

__all__ = ["DRAFT_2020", "DRAFT_7", "Loc", "Registry", "dialect_of", "load_metaschema"]

DRAFT_2020 = "2020-12"
DRAFT_7 = "7"

# Keywords holding subschemas, by shape: one schema, a list of them, or a map of them.
_SINGLE_2020 = (
    "additionalProperties", "unevaluatedProperties", "items", "contains", "propertyNames",
    "not", "if", "then", "else", "unevaluatedItems", "additionalItems",
)
_LIST_2020 = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP_2020 = (
    "$defs", "definitions", "properties", "patternProperties", "dependentSchemas", "dependencies",
)
_SINGLE_7 = (
    "additionalItems", "additionalProperties", "items", "contains", "propertyNames", "not",
    "if", "then", "else",
)
_LIST_7 = ("allOf", "anyOf", "oneOf", "items")
_MAP_7 = ("definitions", "properties", "patternProperties", "dependencies")
_WALK = {DRAFT_2020: (_SINGLE_2020, _LIST_2020, _MAP_2020), DRAFT_7: (_SINGLE_7, _LIST_7, _MAP_7)}

_META_2020 = "https://json-schema.org/draft/2020-12/"
_META_7 = ("http://json-schema.org/draft-07/schema", "https://json-schema.org/draft-07/schema")
_metaschema_cache: dict[str, Any] = {}


def dialect_of(uri: str) -> Optional[str]:
    """The draft a ``$schema`` URI names, if it is one this package implements."""
    if "/draft/2020-12/" in uri or "/draft/2019-09/" in uri:
        return DRAFT_2020
    if any(f"/draft-0{n}/" in uri for n in (4, 6, 7)):
        return DRAFT_7
    return None


def load_metaschema(uri: str) -> Optional[Any]:
    """A bundled official meta-schema by URI (parsed once), or ``None``."""
    rel: Optional[str] = None
    if uri.startswith(_META_2020):
        name = uri[len(_META_2020):]
        if name == "schema" or (name.startswith("meta/") and name[5:].replace("-", "").isalpha()):
            rel = f"draft2020-12/{name}.json"
    elif uri in _META_7:
        rel = "draft7/schema.json"
    if rel is None:
        return None
    if rel not in _metaschema_cache:
        # A path next to this file keeps working when the package is vendored elsewhere.
        path = os.path.join(os.path.dirname(__file__), "metaschemas", *rel.split("/"))
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as fh:
            _metaschema_cache[rel] = json.load(fh)
    return _metaschema_cache[rel]


class Loc(NamedTuple):
    """A schema node and the base URI (its resource) and draft it is read under."""

    schema: Any
    base: str
    draft: str


class Registry:
    """The resources, anchors and base URIs of one schema and what it references."""

    def __init__(self) -> None:
        self.resources: dict[str, Any] = {}
        self.anchors: dict[tuple[str, str], Any] = {}
        self.dynamic: dict[str, dict[str, Loc]] = {}
        self.info: dict[int, tuple[str, str]] = {}
        self._keep: list[Any] = []  # documents stay alive so ``id()`` keys stay unique

    def add(self, document: Any, draft: str, uri: str = "") -> Loc:
        """Index a document; returns the location of its root."""
        self._keep.append(document)
        self._walk(document, uri, draft, is_root=True)
        base, draft = self.info.get(id(document), (uri, draft))
        self.resources.setdefault(uri, document)
        return Loc(document, base, draft)

    def _walk(self, node: Any, base: str, draft: str, *, is_root: bool) -> None:
        if isinstance(node, list):
            for item in node:
                self._walk(item, base, draft, is_root=False)
            return
        if not isinstance(node, dict):
            return
        ident = node.get("$id")
        if isinstance(ident, str) and not (draft == DRAFT_7 and "$ref" in node):
            dialect = node.get("$schema")
            if isinstance(dialect, str) and not is_root:
                draft = dialect_of(dialect) or draft
            uri, fragment = split_fragment(resolve_uri(base, ident))
            if fragment and not fragment.startswith("/"):
                self.anchors[(uri, fragment)] = node  # draft-07 style "$id": "#name"
            if uri != base or is_root:
                base = uri
                self.resources[uri] = node
        if draft == DRAFT_2020:
            self._anchor(node, base)
        self.info[id(node)] = (base, draft)
        single, many, mapping = _WALK[draft]
        for key in single:
            if isinstance(node.get(key), dict):
                self._walk(node[key], base, draft, is_root=False)
        for key in many:
            if isinstance(node.get(key), list):
                self._walk(node[key], base, draft, is_root=False)
        for key in mapping:
            if isinstance(node.get(key), dict):
                for value in node[key].values():
                    self._walk(value, base, draft, is_root=False)

    def _anchor(self, node: dict[str, Any], base: str) -> None:
        anchor = node.get("$anchor")
        if isinstance(anchor, str):
            self.anchors[(base, anchor)] = node
        dynamic = node.get("$dynamicAnchor")
        if isinstance(dynamic, str):
            self.anchors.setdefault((base, dynamic), node)
            self.dynamic.setdefault(base, {})[dynamic] = Loc(node, base, DRAFT_2020)

    def is_dynamic_anchor(self, base: str, name: str, node: Any) -> bool:
        """Whether ``name`` was declared with ``$dynamicAnchor`` on ``node`` in ``base``."""
        loc = self.dynamic.get(base, {}).get(name)
        return loc is not None and loc.schema is node

    def resolve(self, uri: str) -> Loc:
        """The node an absolute URI reference points at; ``LookupError`` when there is none."""
        doc_uri, fragment = split_fragment(uri)
        if doc_uri not in self.resources:
            document = load_metaschema(doc_uri)
            if document is None:
                raise LookupError(f"no schema is known as {doc_uri!r} (nothing is downloaded)")
            dialect = document.get("$schema") if isinstance(document, dict) else None
            self.add(document, dialect_of(dialect or "") or DRAFT_2020, doc_uri)
        root = self.resources[doc_uri]
        base, draft = self.info.get(id(root), (doc_uri, DRAFT_2020))
        if not fragment:
            return Loc(root, base, draft)
        if not fragment.startswith("/"):
            node = self.anchors.get((doc_uri, fragment))
            if node is None:
                raise LookupError(f"no anchor {fragment!r} in {doc_uri or 'the schema'}")
            base, draft = self.info.get(id(node), (base, draft))
            return Loc(node, base, draft)
        node = root
        for segment in pointer_segments(fragment):
            if isinstance(node, dict) and segment in node:
                node = node[segment]
            elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
                node = node[int(segment)]
            else:
                where = doc_uri or "the schema"
                raise LookupError(f"JSON pointer {fragment!r} leads nowhere in {where}")
            base, draft = self.info.get(id(node), (base, draft))
        return Loc(node, base, draft)
