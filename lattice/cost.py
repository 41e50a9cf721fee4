"""What a query cost in dollars: a table lookup on its usage (SPEC 25).

The bundled table is ``prices.json`` beside this module (public list prices, dated; USD per
million ``input``, ``output``, ``cache_read`` and ``cache_write`` tokens), read on first use
and kept. ``Agent(prices={model: {...}})`` adds or replaces entries. A model is looked up
as the reply named it, then with the usual decorations taken off (a Bedrock ``anthropic.``
prefix, a region prefix, ``-v1:0``, Vertex's ``@date``, a trailing date, an ARN's path), so
``claude-sonnet-4-5-20250929``, ``us.anthropic.claude-sonnet-4-5-20250929-v1:0`` and
``claude-sonnet-4-5@20250929`` all find ``claude-sonnet-4-5``. A missing cache price is
the input price. A model not in the table makes the cost ``None`` (a DEBUG log names it).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Set, Tuple

from .usage import Usage

__all__ = ["PRICE_FIELDS", "bundled_prices", "check_prices", "check_max_cost", "price_of",
           "cost_usd", "prices_date", "warn_unchecked"]

PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")
Price = Dict[str, float]
Prices = Mapping[str, Price]

_log = logging.getLogger("lattice")
_VERSION = re.compile(r"-v\d+(?::\d+)?$")
_DATE = re.compile(r"(?:-\d{8}|-\d{4}-\d{2}-\d{2})$")
_WARNED: Set[Tuple[str, ...]] = set()  # max_cost_usd warnings given (once per model set)
_REGION = re.compile(r"^(?:us|eu|apac|au|ca|jp|us-gov|global)\.")


@functools.lru_cache(maxsize=1)
def _table() -> Dict[str, Any]:
    with open(Path(__file__).with_name("prices.json"), encoding="utf-8") as file:
        data: Dict[str, Any] = json.load(file)
    return data


def bundled_prices() -> Dict[str, Price]:
    """The bundled table: model id -> price (a copy), aliases resolved."""
    return {model: dict(price) for model, price in _bundled().items()}


@functools.lru_cache(maxsize=1)
def _bundled() -> Dict[str, Price]:
    data = _table()
    models = {name: {k: float(v) for k, v in entry.items() if k in PRICE_FIELDS}
              for name, entry in data["models"].items()}
    for alias, target in data.get("aliases", {}).items():
        models.setdefault(alias, dict(models[target]))
    return models


def prices_date() -> str:
    """The date the bundled prices were taken (``YYYY-MM-DD``)."""
    return str(_table()["date"])


def check_prices(value: Any, option: str = "prices") -> Optional[Dict[str, Price]]:
    """The ``prices`` Agent option checked: None, or ``{model: {"input": ..., "output":
    ..., "cache_read": ..., "cache_write": ...}}`` with non-negative numbers (ValueError
    naming the first bad entry)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{option} must be a dict {{model: {{'input': ..., 'output': ...}}}}, "
                         f"got {value!r}")
    checked: Dict[str, Price] = {}
    for model, price in value.items():
        if not isinstance(model, str) or not model:
            raise ValueError(f"{option}: a model id must be a non-empty str, got {model!r}")
        if not isinstance(price, Mapping):
            raise ValueError(f"{option}[{model!r}] must be a dict of prices, got {price!r}")
        unknown = [k for k in price if k not in PRICE_FIELDS]
        if unknown:
            raise ValueError(f"{option}[{model!r}] has unknown keys {unknown} "
                             f"(known: {', '.join(PRICE_FIELDS)})")
        for field in ("input", "output"):
            if field not in price:
                raise ValueError(f"{option}[{model!r}] needs {field!r} (USD per million tokens)")
        for field, number in price.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)) or \
                    not math.isfinite(number) or number < 0:
                raise ValueError(f"{option}[{model!r}][{field!r}] must be a non-negative "
                                 f"number (USD per million tokens), got {number!r}")
        checked[model] = {k: float(v) for k, v in price.items()}
    return checked


def check_max_cost(value: Any) -> Optional[float]:
    """The ``max_cost_usd`` Agent option: None or a positive number of dollars."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value <= 0:
        raise ValueError(f"max_cost_usd must be a positive number of US dollars or None, "
                         f"got {value!r}")
    return float(value)


@functools.lru_cache(maxsize=256)
def _names(model: str) -> Tuple[str, str, str]:
    """``model``, then its plainer spellings (see the module docstring). Cached: a query
    prices its result by the same few names every time."""
    name = model.rsplit("/", 1)[-1] if model.startswith(("arn:", "models/")) else model
    name = _REGION.sub("", name)
    if name.startswith("anthropic."):
        name = name[len("anthropic."):]
    name = _VERSION.sub("", name).replace("@", "-")
    return model, name, _DATE.sub("", name)


def price_of(model: str, prices: Optional[Prices] = None) -> Optional[Price]:
    """The price of ``model``: the user's ``prices`` first, then the bundled table."""
    tables = (prices, _bundled()) if prices else (_bundled(),)
    for table in tables:
        for name in _names(model):
            found = table.get(name)
            if found is not None:
                return dict(found)
    return None


def _dollars(usage: Usage, price: Price) -> float:
    read = price.get("cache_read", price["input"])
    write = price.get("cache_write", price["input"])
    return (usage.input_tokens * price["input"] + usage.output_tokens * price["output"]
            + usage.cache_read_input_tokens * read
            + usage.cache_creation_input_tokens * write) / 1_000_000


def cost_usd(usage: Usage, prices: Optional[Prices] = None,
             default_model: Optional[str] = None) -> Optional[float]:
    """What ``usage`` cost in USD, model by model (``usage.by_model``); tokens no model
    claims (a run resumed from a record that kept only totals) count as
    ``default_model``'s. None when a model that used tokens has no price."""
    total = 0.0
    rest = usage
    for model, part in usage.by_model.items():
        rest = _minus(rest, part)
        if not (part.prompt_tokens or part.output_tokens):
            continue
        price = price_of(model, prices) if model else None
        if price is None:
            _log.debug("no price for model %r: total_cost_usd is None (pass "
                       "prices={%r: {'input': ..., 'output': ...}})", model, model)
            return None
        total += _dollars(part, price)
    if rest.prompt_tokens or rest.output_tokens:
        price = price_of(default_model, prices) if default_model else None
        if price is None:
            _log.debug("no price for model %r: total_cost_usd is None", default_model)
            return None
        total += _dollars(rest, price)
    return total


def warn_unchecked(usage: Usage, limit: float, prices: Optional[Prices],
                   model: Optional[str]) -> None:
    """A WARNING, once per set of unpriced models: ``max_cost_usd`` cannot be checked."""
    unpriced = tuple(sorted(m for m in usage.by_model if price_of(m, prices) is None))
    if unpriced in _WARNED:  # not before every request
        return
    _WARNED.add(unpriced)
    _log.warning("max_cost_usd=%s cannot be checked: no price for %s (pass "
                 "prices={model: {'input': ..., 'output': ...}})", limit,
                 ", ".join(unpriced) or model)


def _minus(a: Usage, b: Usage) -> Usage:
    return Usage(max(0, a.input_tokens - b.input_tokens),
                 max(0, a.output_tokens - b.output_tokens),
                 max(0, a.cache_creation_input_tokens - b.cache_creation_input_tokens),
                 max(0, a.cache_read_input_tokens - b.cache_read_input_tokens))
