"""ECMA-262 regular expressions (what JSON Schema's ``pattern`` speaks) as Python ``re``.

The dialects differ where it matters for schemas written by people and models: ECMA's
``\\d``/``\\w``/``\\b`` are ASCII-only, ``\\s`` has its own list, ``$`` never matches before a
trailing newline, ``.`` stops at four line terminators, and ``\\p{Letter}``-style Unicode
property escapes exist. This module rewrites those into plain ``re`` syntax; the Unicode
category tables are built from ``unicodedata`` on first use only.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable, Optional

__all__ = ["translate", "compile_re", "compile_pattern", "Pattern", "RegexError"]

_WS = (
    "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029"
    "\\u202f\\u205f\\u3000\\ufeff"
)
_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_", "s": _WS}
_ECMA_LETTER_ESCAPES = frozenset("dDwWsSbBfnrtvcxupPk")
_LINE_TERMINATORS = "[^\\n\\r\\u2028\\u2029]"

# General-category aliases (Unicode PropertyValueAliases.txt), matched loosely.
_CATEGORY_ALIASES = {
    "L": "L Letter",
    "LC": "LC Cased_Letter",
    "Lu": "Lu Uppercase_Letter",
    "Ll": "Ll Lowercase_Letter",
    "Lt": "Lt Titlecase_Letter",
    "Lm": "Lm Modifier_Letter",
    "Lo": "Lo Other_Letter",
    "M": "M Mark Combining_Mark",
    "Mn": "Mn Nonspacing_Mark",
    "Mc": "Mc Spacing_Mark",
    "Me": "Me Enclosing_Mark",
    "N": "N Number",
    "Nd": "Nd Decimal_Number digit",
    "Nl": "Nl Letter_Number",
    "No": "No Other_Number",
    "P": "P Punctuation punct",
    "Pc": "Pc Connector_Punctuation",
    "Pd": "Pd Dash_Punctuation",
    "Ps": "Ps Open_Punctuation",
    "Pe": "Pe Close_Punctuation",
    "Pi": "Pi Initial_Punctuation",
    "Pf": "Pf Final_Punctuation",
    "Po": "Po Other_Punctuation",
    "S": "S Symbol",
    "Sm": "Sm Math_Symbol",
    "Sc": "Sc Currency_Symbol",
    "Sk": "Sk Modifier_Symbol",
    "So": "So Other_Symbol",
    "Z": "Z Separator",
    "Zs": "Zs Space_Separator",
    "Zl": "Zl Line_Separator",
    "Zp": "Zp Paragraph_Separator",
    "C": "C Other",
    "Cc": "Cc Control cntrl",
    "Cf": "Cf Format",
    "Cs": "Cs Surrogate",
    "Co": "Co Private_Use",
    "Cn": "Cn Unassigned",
}
_SPECIAL = {"any": [(0, 0x10FFFF)], "ascii": [(0, 0x7F)]}

_ranges_by_category: Optional[dict[str, list[tuple[int, int]]]] = None
_property_cache: dict[str, str] = {}
_pattern_cache: dict[str, Pattern] = {}


class RegexError(ValueError):
    """A pattern that is not a valid (or not a supported) ECMA-262 regular expression."""


def _loose(name: str) -> str:
    return name.replace("_", "").replace(" ", "").replace("-", "").lower()


def _category_ranges() -> dict[str, list[tuple[int, int]]]:
    """Code point ranges per two-letter category; one scan of all code points, then cached."""
    global _ranges_by_category
    if _ranges_by_category is None:
        table: dict[str, list[tuple[int, int]]] = {}
        category = unicodedata.category
        start, current = 0, category("\x00")
        for cp in range(1, 0x110000):
            cat = category(chr(cp))
            if cat != current:
                table.setdefault(current, []).append((start, cp - 1))
                start, current = cp, cat
        table.setdefault(current, []).append((start, 0x10FFFF))
        _ranges_by_category = table
    return _ranges_by_category


def _property_class(name: str) -> str:
    """The inside of a character class (no brackets) for ``\\p{name}``."""
    cached = _property_cache.get(name)
    if cached is not None:
        return cached
    key = _loose(name.split("=", 1)[1] if "=" in name else name)
    if "=" in name and _loose(name.split("=", 1)[0]) not in ("gc", "generalcategory"):
        raise RegexError(f"unsupported Unicode property \\p{{{name}}}")
    ranges: list[tuple[int, int]] = list(_SPECIAL.get(key, []))
    if not ranges:
        code = next(
            (c for c, aliases in _CATEGORY_ALIASES.items()
             if key in (_loose(a) for a in aliases.split())),
            None,
        )
        if code is None:
            raise RegexError(f"unknown Unicode property \\p{{{name}}}")
        table = _category_ranges()
        if code == "LC":
            codes: tuple[str, ...] = ("Lu", "Ll", "Lt")
        else:
            codes = tuple(c for c in table if c.startswith(code))
        ranges = sorted(r for c in codes for r in table.get(c, []))
    text = "".join(
        f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges
    )
    _property_cache[name] = text
    return text


class _Translator:
    """One left-to-right pass over an ECMA pattern, emitting Python ``re`` syntax."""

    def __init__(self, source: str) -> None:
        self.src = source
        self.i = 0

    def fail(self, what: str) -> RegexError:
        return RegexError(f"{what} at position {self.i} in {self.src!r}")

    def read_braced(self) -> str:
        end = self.src.find("}", self.i)
        if not self.src.startswith("{", self.i) or end < 0:
            raise self.fail("expected {...}")
        body = self.src[self.i + 1 : end]
        self.i = end + 1
        return body

    def escape(self) -> tuple[str, bool, bool]:
        """Translate the escape after a backslash: (text, is_class_body, negated)."""
        ch = self.src[self.i]
        self.i += 1
        if ch.lower() in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[ch.lower()], True, ch.isupper()
        if ch in "pP":
            return _property_class(self.read_braced()), True, ch == "P"
        if ch == "c" and self.i < len(self.src) and self.src[self.i].isalpha():
            self.i += 1
            return f"\\x{ord(self.src[self.i - 1]) % 32:02x}", False, False
        if ch == "u":
            return self.unicode_escape(), False, False
        if ch == "k" and self.src.startswith("<", self.i):
            end = self.src.index(">", self.i)
            name, self.i = self.src[self.i + 1 : end], end + 1
            return f"(?P={name})", False, False
        if ch.isalpha() and ch not in _ECMA_LETTER_ESCAPES:
            # \a, \A, \Z, \z...: Python features (or nothing) that ECMA-262 does not have.
            raise self.fail(f"unknown escape \\{ch}")
        if ch == "/":
            return "/", False, False
        return "\\" + ch, False, False

    def unicode_escape(self) -> str:
        if self.src.startswith("{", self.i):
            return f"\\U{int(self.read_braced(), 16):08x}"
        hex4 = self.src[self.i : self.i + 4]
        if len(hex4) != 4:
            raise self.fail("bad \\u escape")
        self.i += 4
        cp = int(hex4, 16)
        low = self.src[self.i + 2 : self.i + 6] if self.src.startswith("\\u", self.i) else ""
        if 0xD800 <= cp <= 0xDBFF and len(low) == 4 and 0xDC00 <= int(low, 16) <= 0xDFFF:
            self.i += 6  # a surrogate pair written as two escapes is one code point
            cp = 0x10000 + ((cp - 0xD800) << 10) + (int(low, 16) - 0xDC00)
        return f"\\U{cp:08x}"

    def char_class(self) -> str:
        negated = self.src.startswith("^", self.i)
        self.i += negated
        if self.src.startswith("]", self.i):
            self.i += 1
            return "[\\s\\S]" if negated else "(?!)"
        items: list[str] = []
        excluded: list[str] = []
        while True:
            if self.i >= len(self.src):
                raise self.fail("unterminated character class")
            ch = self.src[self.i]
            self.i += 1
            if ch == "]":
                break
            if ch == "\\":
                text, _, neg = self.escape()
                (excluded if neg else items).append(text)
                continue
            # Escaped so that Python's set-operation syntax never triggers.
            items.append("\\" + ch if ch in "[&~|" else ch)
        body = "".join(items)
        if not excluded:
            return f"[{'^' if negated else ''}{body}]"
        alternatives = ([f"[{body}]"] if body else []) + [f"[^{e}]" for e in excluded]
        union = "|".join(alternatives)
        return f"(?:(?!{union})[\\s\\S])" if negated else f"(?:{union})"

    def group_opening(self) -> str:
        """``(?:``, lookarounds and named groups; Python-only forms like ``(?P`` are errors."""
        for ecma in ("?:", "?=", "?!", "?<=", "?<!"):
            if self.src.startswith(ecma, self.i):
                self.i += len(ecma)
                return "(" + ecma
        if self.src.startswith("?<", self.i):
            self.i += 2
            return "(?P<"
        raise self.fail("unsupported group syntax")

    def translate(self) -> str:
        out: list[str] = []
        src = self.src
        while self.i < len(src):
            ch = src[self.i]
            self.i += 1
            if ch == "\\":
                if self.i >= len(src):
                    raise self.fail("trailing backslash")
                text, is_body, neg = self.escape()
                out.append(f"[{'^' if neg else ''}{text}]" if is_body else text)
            elif ch == "[":
                out.append(self.char_class())
            elif ch == ".":
                out.append(_LINE_TERMINATORS)
            elif ch == "$":
                out.append("\\Z")  # ECMA "$" never matches before a final newline
            elif ch == "(" and src.startswith("?", self.i):
                out.append(self.group_opening())
            else:
                out.append(ch)
        return "".join(out)


def translate(pattern: str) -> str:
    """The Python ``re`` source equivalent to an ECMA-262 ``pattern``."""
    return _Translator(pattern).translate()


def compile_re(pattern: str) -> re.Pattern[str]:
    """Translate and compile, uncached; raises ``RegexError`` for an invalid pattern."""
    try:
        return re.compile(translate(pattern), re.ASCII)
    except (re.error, IndexError, ValueError, OverflowError, RecursionError) as exc:
        if isinstance(exc, RegexError):
            raise
        raise RegexError(f"invalid regular expression {pattern!r}: {exc}") from None


class Pattern:
    """A compiled ``pattern`` whose ``search(text) -> bool`` runs in bounded time.

    Strings up to ``limit`` characters go to ``re``; longer ones to a linear-time DFA
    (see ``_regex_guard``), or, when the pattern uses lookarounds or backreferences, are
    refused: reported as not matching, and ``refuses(text)`` is true.
    """

    __slots__ = ("source", "limit", "search", "raw", "exact")

    def __init__(self, source: str, compiled: re.Pattern[str]) -> None:
        from ._regex_guard import Unsupported, build_dfa, length_limit, parse

        self.source = source
        tree = parse(compiled.pattern)
        self.limit = length_limit(tree)
        try:
            dfa: Optional[Callable[[str], bool]] = build_dfa(tree)
        except Unsupported:
            dfa = None
        self.exact = dfa is not None  # every string gets a true answer
        self.search: Callable[[str], bool] = _bounded(compiled.search, self.limit, dfa)
        self.raw = compiled.search  # only for strings of at most ``limit`` characters

    def refuses(self, text: str) -> bool:
        """Whether ``text`` is too long to be checked against this pattern at all."""
        return not self.exact and len(text) > self.limit


def _bounded(
    search: Callable[[str], object], limit: int, dfa: Optional[Callable[[str], bool]]
) -> Callable[[str], bool]:
    if dfa is None:
        return lambda text: len(text) <= limit and search(text) is not None
    return lambda text: search(text) is not None if len(text) <= limit else dfa(text)


def compile_pattern(pattern: str) -> Pattern:
    """Translate and compile (cached); raises ``RegexError`` for an invalid pattern."""
    compiled = _pattern_cache.get(pattern)
    if compiled is None:
        compiled = Pattern(pattern, compile_re(pattern))
        if len(_pattern_cache) > 2048:
            _pattern_cache.clear()
        _pattern_cache[pattern] = compiled
    return compiled
