"""``dependencies``: the draft-07 keyword that 2020-12 split in two.

Draft 7 folds ``dependentRequired`` (array values) and ``dependentSchemas`` (schema
values) into one keyword. 2020-12 schemas may use it too (the 2020-12 meta-schema still
lists it), so both drafts' tables accept it. Array-form ``items`` with
``additionalItems`` is in ``_applicators``; that ``$ref`` overrides its siblings in
draft 7 is handled by the compiler.
"""

from __future__ import annotations

from typing import Any, Optional

from ._checks import Check, when_present
from ._combinators import dependent_schema_rules
from ._compiler import Env
from ._json import short_json
from ._keywords import dependent_required_rules

__all__ = ["kw_dependencies"]


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
