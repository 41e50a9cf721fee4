"""The keyword table: every keyword lattice validates, the drafts that have it, and the
function that compiles it. Adding a keyword is one function and one row here.

Rows are in evaluation order, which is also the order of the errors a schema reports:
cheap checks on the instance first, then applicators, then in-place subschemas, and the
``unevaluated*`` keywords last (they read what their siblings evaluated). A keyword
absent from both tables (``$id``, ``title``, ``default``, ...) is an annotation.
"""

from __future__ import annotations

from ._applicators import (
    kw_additional_properties,
    kw_contains,
    kw_items,
    kw_pattern_properties,
    kw_prefix_items,
    kw_properties,
    kw_property_names,
)
from ._combinators import (
    kw_all_of,
    kw_any_of,
    kw_definitions,
    kw_defs,
    kw_dependent_schemas,
    kw_dynamic_ref,
    kw_if,
    kw_not,
    kw_one_of,
    kw_ref,
)
from ._compiler import KeywordFn, Vocabulary
from ._draft7 import kw_dependencies
from ._json import ARRAY, OBJECT, STRING
from ._keywords import (
    kw_const,
    kw_dependent_required,
    kw_enum,
    kw_exclusive_maximum,
    kw_exclusive_minimum,
    kw_format,
    kw_maximum,
    kw_minimum,
    kw_multiple_of,
    kw_pattern,
    kw_required,
    kw_type,
    kw_unique_items,
    max_size,
    min_size,
)
from ._registry import DRAFT_7, DRAFT_2020
from ._unevaluated import build_items, build_props, kw_unevaluated_items, kw_unevaluated_properties

__all__ = ["KEYWORDS", "VOCABULARY"]

_BOTH = (DRAFT_2020, DRAFT_7)
_NEW = (DRAFT_2020,)  # keywords 2020-12 added (draft 7 ignores them)

KEYWORDS: tuple[tuple[str, KeywordFn, tuple[str, ...]], ...] = (
    # -- any instance
    ("type", kw_type, _BOTH),
    ("enum", kw_enum, _BOTH),
    ("const", kw_const, _BOTH),
    # -- numbers
    ("multipleOf", kw_multiple_of, _BOTH),
    ("maximum", kw_maximum, _BOTH),
    ("exclusiveMaximum", kw_exclusive_maximum, _BOTH),
    ("minimum", kw_minimum, _BOTH),
    ("exclusiveMinimum", kw_exclusive_minimum, _BOTH),
    # -- strings
    ("maxLength", max_size("maxLength", STRING, "must be {} characters long"), _BOTH),
    ("minLength", min_size("minLength", STRING, "must be {} characters long"), _BOTH),
    ("pattern", kw_pattern, _BOTH),
    ("format", kw_format, _BOTH),
    # -- arrays
    ("maxItems", max_size("maxItems", ARRAY, "must have {} items"), _BOTH),
    ("minItems", min_size("minItems", ARRAY, "must have {} items"), _BOTH),
    ("uniqueItems", kw_unique_items, _BOTH),
    # -- objects
    ("maxProperties", max_size("maxProperties", OBJECT, "must have {} properties"), _BOTH),
    ("minProperties", min_size("minProperties", OBJECT, "must have {} properties"), _BOTH),
    ("required", kw_required, _BOTH),
    ("dependentRequired", kw_dependent_required, _NEW),
    # -- applicators for members and items
    ("properties", kw_properties, _BOTH),
    ("patternProperties", kw_pattern_properties, _BOTH),
    ("additionalProperties", kw_additional_properties, _BOTH),
    ("propertyNames", kw_property_names, _BOTH),
    ("prefixItems", kw_prefix_items, _NEW),
    ("items", kw_items, _BOTH),  # both forms: a schema, or (draft 7) an array of schemas
    ("contains", kw_contains, _BOTH),
    # -- in-place applicators
    ("$defs", kw_defs, _BOTH),
    ("definitions", kw_definitions, _BOTH),
    ("$ref", kw_ref, _BOTH),
    ("$dynamicRef", kw_dynamic_ref, _NEW),
    ("allOf", kw_all_of, _BOTH),
    ("anyOf", kw_any_of, _BOTH),
    ("oneOf", kw_one_of, _BOTH),
    ("not", kw_not, _BOTH),
    ("if", kw_if, _BOTH),
    ("dependentSchemas", kw_dependent_schemas, _NEW),
    ("dependencies", kw_dependencies, _BOTH),
    # -- last: they read what the keywords above evaluated
    ("unevaluatedProperties", kw_unevaluated_properties, _NEW),
    ("unevaluatedItems", kw_unevaluated_items, _NEW),
)

VOCABULARY = Vocabulary(
    tables={draft: {name: fn for name, fn, drafts in KEYWORDS if draft in drafts}
            for draft in _BOTH},
    props=build_props,
    items=build_items,
)
