"""Draft-07 keywords that 2020-12 renamed or split, and the per-draft keyword tables.

Draft 7 spells tuple validation as array-form ``items`` plus ``additionalItems``, and
folds ``dependentRequired``/``dependentSchemas`` into ``dependencies``. 2020-12 schemas
may use these older forms too (the 2020-12 meta-schema still lists ``dependencies``),
so both tables accept them. That ``$ref`` overrides its siblings in draft 7 is handled
by the compiler.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ._applicators import APPLICATORS, positional_check, rest_items_check
from ._combinators import COMBINATORS, dependent_schema_rules
from ._compiler import Check, Env, _all, when_present
from ._errors import ErrorDetail
from ._json import ARRAY, short_json
from ._keywords import VALIDATION, dependent_required_rules

__all__ = ["kw_items", "kw_dependencies", "tables"]

KeywordFn = Callable[[Env, Any], Optional[Check]]


def kw_items(env: Env, value: Any) -> Check:
    """Schema-form ``items`` (every item) or array-form (by position, then ``additionalItems``)."""
    if not isinstance(value, list):
        return rest_items_check(env.sub(value, "items"), 0, "items")
    positional = positional_check([env.sub(v, "items", i) for i, v in enumerate(value)], "items")
    extra = env.schema.get("additionalItems")
    if extra is None:
        return positional
    rest = rest_items_check(env.sub(extra, "additionalItems"), len(value), "additionalItems")

    def errs(x: Any, path: Any, out: list[ErrorDetail]) -> None:
        positional.errs(x, path, out)
        rest.errs(x, path, out)

    return Check(ARRAY, _all((positional.ok, rest.ok)), errs, "items")


def kw_dependencies(env: Env, value: Any) -> Optional[Check]:
    """Array values name required properties; schema values apply to the whole object."""
    if not isinstance(value, dict):
        raise env.error(f"expected an object, got {short_json(value)}", "dependencies")
    required: list[tuple[str, tuple[str, ...]]] = []
    schemas = {}
    for key, dep in value.items():
        if isinstance(dep, list):
            if not all(isinstance(d, str) for d in dep):
                got = short_json(dep)
                raise env.error(f"expected an array of strings, got {got}", "dependencies", key)
            if dep:
                required.append((key, tuple(dep)))
        else:
            schemas[key] = env.sub(dep, "dependencies", key)
    # Required-name rules first, then schemas: their errors come out in that order.
    rules = dependent_required_rules(required, "dependencies") + dependent_schema_rules(schemas)
    return when_present(rules, "dependencies") if rules else None


def _tables() -> dict[str, dict[str, KeywordFn]]:
    from ._unevaluated import UNEVALUATED

    only_2020 = {"dependentRequired", "dependentSchemas", "prefixItems", "$dynamicRef"}
    draft7: dict[str, KeywordFn] = {
        k: f for k, f in {**VALIDATION, **APPLICATORS, **COMBINATORS}.items() if k not in only_2020
    }
    draft7["items"] = kw_items
    draft7["dependencies"] = kw_dependencies
    draft2020: dict[str, KeywordFn] = {
        **VALIDATION, **APPLICATORS, **COMBINATORS, "dependencies": kw_dependencies
    }
    draft2020.update(UNEVALUATED)  # last: they read what their siblings evaluated
    return {"2020-12": draft2020, "7": draft7}


_cache: dict[str, dict[str, dict[str, KeywordFn]]] = {}


def tables() -> dict[str, dict[str, KeywordFn]]:
    """The keyword table of each draft, in evaluation order (cheap checks first)."""
    if not _cache:
        _cache["tables"] = _tables()
    return _cache["tables"]
