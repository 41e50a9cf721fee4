"""Token counts, summed over a query's model requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

__all__ = ["Usage", "USAGE_FIELDS", "token_count"]

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                "cache_read_input_tokens")


def token_count(value: Any) -> int:
    """A provider's token count as an int: null, a bool or anything odd is 0 ("not reported")."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class Usage:
    """Token counts; 0 means "not reported".

    ``by_model`` splits them by model (model id -> ``Usage``): keyed by the model each
    reply reports, else the request's (SPEC 22/25a); sums keep the split. It is left out
    of ``==`` and ``to_dict()`` (totals compare as before).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    by_model: Dict[str, Usage] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]]) -> Usage:
        """Read a provider ``usage`` dict (missing, null or odd values count as 0)."""
        if not data:
            return cls()
        get = data.get
        i, o = get("input_tokens"), get("output_tokens")
        w, r = get("cache_creation_input_tokens"), get("cache_read_input_tokens")
        # token_count inlined for the common case (once per turn): ``type(n) is int`` is
        # no bool.
        made = cls(i if type(i) is int else token_count(i),
                   o if type(o) is int else token_count(o),
                   w if type(w) is int else token_count(w),
                   r if type(r) is int else token_count(r))
        split = get("by_model")  # only in lattice's own records (``to_dict(by_model=True)``)
        if isinstance(split, dict):
            made.by_model = {str(k): cls.from_dict(v) for k, v in split.items()
                             if isinstance(v, dict)}
        return made

    @property
    def prompt_tokens(self) -> int:
        """The size of the prompt that produced this usage (input plus both cache kinds)."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        total = Usage(self.input_tokens + other.input_tokens,
                      self.output_tokens + other.output_tokens,
                      self.cache_creation_input_tokens + other.cache_creation_input_tokens,
                      self.cache_read_input_tokens + other.cache_read_input_tokens)
        if other.by_model:
            merged = dict(self.by_model)
            for model, part in other.by_model.items():
                have = merged.get(model)
                merged[model] = part if have is None else have + part
            total.by_model = merged
        elif self.by_model:
            total.by_model = dict(self.by_model)
        return total

    def of_model(self, model: Optional[str]) -> Usage:
        """These totals, split as all ``model``'s (a reply's usage; no model: no split)."""
        if model:
            self.by_model = {model: Usage(self.input_tokens, self.output_tokens,
                                          self.cache_creation_input_tokens,
                                          self.cache_read_input_tokens)}
        return self

    def to_dict(self, *, by_model: bool = False) -> Dict[str, Any]:
        """The four counts (and, with ``by_model=True`` and a split, ``"by_model"``)."""
        out: Dict[str, Any] = {name: getattr(self, name) for name in USAGE_FIELDS}
        if by_model and self.by_model:
            out["by_model"] = {m: u.to_dict() for m, u in self.by_model.items()}
        return out
