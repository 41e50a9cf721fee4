"""Bounded-time ``pattern`` matching: no catastrophic backtracking on model-provided strings.

Python's ``re`` backtracks. ``^(a+)+$`` against ``"a" * 28 + "b"`` takes most of a minute,
``a*a*a*c`` against 1,000 ``a`` half a minute, all inside one C call that holds the GIL. So
each compiled pattern gets a *length limit* from its structure: an estimate of how many
paths backtracking can try on a string of length ``n`` (the product of the choices its
quantifiers and alternations offer, exponential for nested ones such as ``(a+)+``,
``(a|ab)*``, ``(.*)*``, and one more factor of ``n`` when not anchored with ``^``). Strings
up to the longest length whose estimate stays under ``BUDGET`` go to ``re`` (fast in
practice); longer ones go to the matcher here, a lazily built DFA over the pattern's
Thompson NFA, whose time is linear in the string. The DFA covers everything that a
translated JSON Schema pattern uses except lookarounds and backreferences; a pattern with
those, matched against a string over its limit, is refused: reported as not matching
(``refuses`` lets the caller say why).
"""

from __future__ import annotations

import importlib
import math
import sys
from bisect import bisect_right
from typing import Any, Callable, FrozenSet, Optional, Tuple

__all__ = ["BUDGET", "length_limit", "build_dfa", "Unsupported"]

BUDGET = 2_000_000  # backtracking paths allowed to ``re`` (a few tens of ms at worst)
_NO_LIMIT = sys.maxsize
_MAX_STATES = 20_000  # NFA size bound (large counted repeats unroll)
_MAX_CACHE = 20_000  # cached DFA transitions before the cache starts over
_MAX_CACHED_NFA_STATES = 500_000  # NFA states in cached DFA states, likewise
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_CATEGORIES: dict[str, Callable[[str], bool]] = {
    "CATEGORY_DIGIT": lambda c: "0" <= c <= "9",
    "CATEGORY_NOT_DIGIT": lambda c: not "0" <= c <= "9",
    "CATEGORY_SPACE": lambda c: c in " \t\n\r\f\v",
    "CATEGORY_NOT_SPACE": lambda c: c not in " \t\n\r\f\v",
    "CATEGORY_WORD": lambda c: c in _WORD,
    "CATEGORY_NOT_WORD": lambda c: c not in _WORD,
}
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


class Unsupported(Exception):
    """A construct the DFA cannot run (lookaround, backreference, inline flags...)."""


def parse(source: str) -> Any:
    """The ``sre`` parse tree of a Python pattern (``re._parser`` moved in 3.11)."""
    name = "re._parser" if sys.version_info >= (3, 11) else "sre_parse"
    return importlib.import_module(name).parse(source, 256)  # 256: re.ASCII


# -- how much can backtracking cost? ------------------------------------------------------


def _power(base: float, exp: int) -> float:
    if base <= 1:
        return 1.0
    return math.inf if exp * math.log(base) > 700 else float(base) ** exp


def _cost(items: Any, n: int) -> float:
    """Paths a backtracking matcher may try for ``items`` on ``n`` characters (an estimate)."""
    total = 1.0
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            lo, hi, body = av
            top = min(hi, n)
            inner = _cost(body, n)
            total *= max(top - lo + 1, 1) * _power(inner, max(top, 1))
        elif name == "BRANCH":
            total *= sum(_cost(b, n) for b in av[1])
        elif name == "SUBPATTERN":
            total *= _cost(av[-1], n)
        elif name in ("ASSERT", "ASSERT_NOT"):
            total *= _cost(av[1], n)
        elif name == "GROUPREF_EXISTS":
            total *= _cost(av[1], n) + (_cost(av[2], n) if av[2] else 1)
        elif name == "ATOMIC_GROUP":
            total *= _cost(av, n)
        if total > BUDGET:
            return math.inf
    return total


def length_limit(tree: Any) -> int:
    """The longest string ``re`` may match against this parse tree within ``BUDGET``."""
    data = list(tree)
    anchored = bool(data) and str(data[0][0]) == "AT" and str(data[0][1]) in (
        "AT_BEGINNING", "AT_BEGINNING_STRING")

    def fits(n: int) -> bool:
        return (1 if anchored else n + 1) * _cost(data, n) <= BUDGET

    if fits(1 << 24):
        return _NO_LIMIT
    lo, hi = 0, 1 << 24  # fits(lo) or lo == 0; not fits(hi); the estimate grows with n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


# -- the NFA -------------------------------------------------------------------------------

_CHAR, _EPS, _ASSERT, _MATCH = range(4)


class _NFA:
    """States as parallel lists: a kind, a predicate or assertion, and the next states."""

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.test: list[Any] = []
        self.outs: list[list[int]] = []

    def add(self, kind: int, outs: list[int], test: Any = None) -> int:
        if len(self.kind) >= _MAX_STATES:
            raise Unsupported("the pattern is too large")
        self.kind.append(kind)
        self.test.append(test)
        self.outs.append(outs)
        return len(self.kind) - 1

    def seq(self, items: Any, nxt: int) -> int:
        """Build ``items`` backwards, ending in state ``nxt``; returns the start state."""
        for op, av in reversed(list(items)):
            nxt = self.one(str(op), av, nxt)
        return nxt

    def one(self, name: str, av: Any, nxt: int) -> int:
        if name == "LITERAL":
            ch = chr(av)
            return self.add(_CHAR, [nxt], lambda c: c == ch)
        if name == "NOT_LITERAL":
            ch = chr(av)
            return self.add(_CHAR, [nxt], lambda c: c != ch)
        if name == "ANY":
            return self.add(_CHAR, [nxt], lambda c: c != "\n")
        if name == "IN":
            return self.add(_CHAR, [nxt], _char_class(av))
        if name == "BRANCH":
            return self.add(_EPS, [self.seq(b, nxt) for b in av[1]])
        if name == "SUBPATTERN" and not av[1] and not av[2]:
            return self.seq(av[-1], nxt)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            return self.repeat(av, nxt)
        if name == "AT" and str(av) in _ASSERTIONS:
            return self.add(_ASSERT, [nxt], str(av))
        raise Unsupported(name)

    def repeat(self, av: Any, nxt: int) -> int:
        lo, hi, body = av
        if hi > 1 << 30:  # MAXREPEAT (2**32 - 1): unbounded
            loop = self.add(_EPS, [])
            self.outs[loop][:] = [self.seq(body, loop), nxt]
            cur = loop
        else:
            cur = nxt
            for _ in range(hi - lo):
                cur = self.add(_EPS, [self.seq(body, cur), nxt])
        for _ in range(lo):
            cur = self.seq(body, cur)
        return cur


def _char_class(items: Any) -> Callable[[str], bool]:
    negated = False
    chars: set[str] = set()
    spans: list[tuple[int, int]] = []
    cats: list[Callable[[str], bool]] = []
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            chars.add(chr(av))
        elif name == "RANGE":
            spans.append((av[0], av[1]))
        elif name == "CATEGORY" and str(av) in _CATEGORIES:
            cats.append(_CATEGORIES[str(av)])
        else:
            raise Unsupported(name)
    spans.sort()
    starts = [lo for lo, _ in spans]
    ends = _running_max([hi for _, hi in spans])  # a span may lie inside an earlier one

    def test(c: str) -> bool:
        if c in chars or any(f(c) for f in cats):
            return not negated
        i = bisect_right(starts, ord(c)) - 1
        return (i >= 0 and ord(c) <= ends[i]) != negated

    return test


def _running_max(values: list[int]) -> list[int]:
    out, top = [], -1
    for v in values:
        top = max(top, v)
        out.append(top)
    return out


_ASSERTIONS = ("AT_BEGINNING", "AT_BEGINNING_STRING", "AT_END_STRING", "AT_BOUNDARY",
               "AT_NON_BOUNDARY")


# -- the DFA, built as the input needs it --------------------------------------------------

_MISS: Any = object()
# NFA states before closure, at the start?, previous char a word char?
Key = Tuple[FrozenSet[int], bool, bool]


class _DFA:
    """Subset construction on demand. A DFA state is a ``Key``, which is all that the
    assertions need; transitions are pure functions of (key, char), so the cache needs no
    lock: a thread that misses (or finds it just cleared) computes the same answer."""

    def __init__(self, nfa: _NFA, start: int) -> None:
        self.nfa = nfa
        self.start = start
        self.begin: Key = (frozenset((start,)), True, False)
        self.cache: dict[tuple[Key, str], Optional[Key]] = {}
        self.keys: dict[Key, Key] = {}
        self.size = 0  # NFA states held by the cached DFA states

    def _closure(self, key: Key, nxt: Optional[str]) -> Optional[list[int]]:
        """The consuming states reachable without input, or ``None`` when MATCH is."""
        pre, at_start, prev_word = key
        next_word = nxt is not None and nxt in _WORD
        kind, test, outs = self.nfa.kind, self.nfa.test, self.nfa.outs
        seen: set[int] = set()
        stack = list(pre)
        found = []
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            k = kind[s]
            if k == _MATCH:
                return None
            if k == _CHAR:
                found.append(s)
            elif k == _EPS or _holds(test[s], at_start, nxt is None, prev_word, next_word):
                stack.extend(outs[s])
        return found

    def _step(self, key: Key, ch: str) -> Optional[Key]:
        """The next state after ``ch``, or ``None`` when a match ends before ``ch``."""
        chars = self._closure(key, ch)
        target: Optional[Key] = None
        if chars is not None:
            test, outs = self.nfa.test, self.nfa.outs
            succ = {outs[s][0] for s in chars if test[s](ch)}
            succ.add(self.start)  # search: a match may start at every position
            fresh = (frozenset(succ), False, ch in _WORD)
            target = self.keys.setdefault(fresh, fresh)  # equal states share one object
            if target is fresh:
                self.size += len(succ)
        if len(self.cache) >= _MAX_CACHE or self.size > _MAX_CACHED_NFA_STATES:
            self.cache.clear()  # memory stays bounded; time stays linear without the cache
            self.keys.clear()
            self.size = 0
        self.cache[(key, ch)] = target
        return target

    def search(self, text: str) -> bool:
        key = self.begin
        cache = self.cache
        for ch in text:
            nxt = cache.get((key, ch), _MISS)
            if nxt is _MISS:
                nxt = self._step(key, ch)
            if nxt is None:
                return True
            key = nxt
        return self._closure(key, None) is None


def _holds(code: str, at_start: bool, at_end: bool, prev_word: bool, next_word: bool) -> bool:
    if code in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
        return at_start
    if code == "AT_END_STRING":
        return at_end
    if code == "AT_BOUNDARY":
        return prev_word != next_word
    return prev_word == next_word  # AT_NON_BOUNDARY


def build_dfa(tree: Any) -> Callable[[str], bool]:
    """A linear-time ``search`` (does any substring match?) for a parse tree.

    Raises ``Unsupported`` for lookarounds, backreferences and other non-regular parts.
    """
    nfa = _NFA()
    match = nfa.add(_MATCH, [])
    return _DFA(nfa, nfa.seq(tree, match)).search
