"""Token counts, summed over a query's model requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

__all__ = ["Usage", "USAGE_FIELDS", "token_count"]

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                "cache_read_input_tokens")


def token_count(value: Any) -> int:
    """A provider's token count as an int: null, a bool or anything odd is 0 ("not reported")."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class Usage:
    """Token counts; 0 means "not reported"."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

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
        return cls(i if type(i) is int else token_count(i),
                   o if type(o) is int else token_count(o),
                   w if type(w) is int else token_count(w),
                   r if type(r) is int else token_count(r))

    @property
    def prompt_tokens(self) -> int:
        """The size of the prompt that produced this usage (input plus both cache kinds)."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cache_creation_input_tokens + other.cache_creation_input_tokens,
                     self.cache_read_input_tokens + other.cache_read_input_tokens)

    def to_dict(self) -> Dict[str, int]:
        return {name: getattr(self, name) for name in USAGE_FIELDS}
