"""``pattern`` matching in bounded time: catastrophic backtracking is never reached.

Before the guard, ``^(a+)+$`` against 28 ``a`` and a ``b`` ran for ~45 s inside one C call.
Now strings longer than a pattern's backtracking-safe length go to a linear-time DFA,
which must agree with ``re`` wherever both run.
"""

from __future__ import annotations

import json
import random
import time

import pytest
from helpers import SHARED

from lattice import schema
from lattice.schema._regex import compile_pattern, compile_re
from lattice.schema._regex_guard import Unsupported, build_dfa, parse

SUITE = SHARED / "data/JSON-Schema-Test-Suite/tests"

# (pattern, instance, valid): each takes seconds to hours with plain ``re``.
EVIL = [
    ("^(a+)+$", "a" * 28 + "b", False),
    ("^(a|a)*$", "a" * 40 + "b", False),
    ("^(a|aa)+$", "a" * 60 + "!", False),
    ("^(\\w+\\s?)*$", "word " * 400 + "!", False),
    ("(.*)*x", "a" * 20000, False),
    ("a*a*a*c", "a" * 5000, False),
    (".*a.*b", "a" * 20000, False),
    ("^(a?){30}a{30}$", "a" * 30, True),
    ("^([a-z0-9]+[-.]?)+[a-z0-9]+$", "a" * 5000 + "-", False),
]


def _timed(fn, *args):
    """``fn(*args)`` and the CPU seconds this thread spent in it: backtracking burns CPU,
    and CPU time does not grow when a loaded machine gives the test a small share of it."""
    start = time.thread_time()
    result = fn(*args)
    return result, time.thread_time() - start


@pytest.mark.parametrize(("pattern", "text", "valid"), EVIL, ids=[e[0] for e in EVIL])
def test_evil_patterns_finish_quickly_with_the_right_answer(pattern, text, valid):
    validator = schema.compile({"type": "string", "pattern": pattern})
    (got, errors), elapsed = _timed(lambda: (validator.is_valid(text), validator.errors(text)))
    assert elapsed < 1.0
    assert got is valid
    if not valid:
        assert len(errors) == 1
        assert errors[0].message.startswith(f"must match the pattern {json.dumps(pattern)} (got ")


def test_evil_pattern_properties_and_unevaluated_are_bounded_too():
    s = {"patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}
    key = "a" * 40 + "b"
    validator = schema.compile(s)
    errors, elapsed = _timed(validator.errors, {key: 1, "a" * 40: 2})
    assert elapsed < 1.0
    assert [e.keyword for e in errors] == ["additionalProperties"]
    s2 = {"patternProperties": {"^(a|a)*$": True}, "unevaluatedProperties": False}
    ok, elapsed = _timed(schema.compile(s2).is_valid, {key: 1})
    assert elapsed < 1.0 and ok is False


def test_format_regex_of_an_evil_pattern_is_just_a_valid_regex():
    validator = schema.compile({"format": "regex"}, format_checker=True)
    ok, elapsed = _timed(validator.is_valid, "^(a+)+$" * 200)
    assert ok is True and elapsed < 1.0


def test_pattern_the_dfa_cannot_run_refuses_long_strings_with_a_clear_error():
    # A lookahead keeps this pattern out of the DFA: short strings are still exact,
    # strings over its safe length are refused rather than backtracked.
    validator = schema.compile({"pattern": "^(?=a)(a+)+$"})
    assert validator.is_valid("aaa") and not validator.is_valid("baa")
    text = "a" * 28 + "b"
    (ok, errors), elapsed = _timed(lambda: (validator.is_valid(text), validator.errors(text)))
    assert elapsed < 1.0 and ok is False
    limit = compile_pattern("^(?=a)(a+)+$").limit
    assert 0 < limit < 28
    assert [e.message for e in errors] == [
        f"is too long (29 characters) to be checked against the pattern \"^(?=a)(a+)+$\" "
        f"in bounded time (at most {limit})"
    ]


def test_safe_patterns_keep_re_for_any_length():
    assert compile_pattern("^[a-z]+$").limit > 10**6
    assert compile_pattern("^\\d{4}-\\d{2}-\\d{2}$").limit > 10**6
    assert compile_pattern("^(a+)+$").limit < 20


HAND = [
    "^(a+)+$", "(ab|a)*c", "x|^y|z$", "\\bfoo\\b", "\\Bo\\B", "^$", "", "a{2,4}b?",
    "^[^abc]*$", "[\\s\\S]+", "^.{2,5}$", "\\p{L}+", "[^\\d\\w]+", "^(a?){5}a{5}$",
    "^\\d{3}-?\\d{4}$", "^[\\w.+-]+@[\\w-]+\\.[\\w.-]+$", "(a|b|ab)*?c$", "\\cJ", "[\\b]",
    "^\\S+$", "\\u{1F600}", "a.b", "^[^\\n]*$", "^(?:x|y)*z{0,3}$",
]


def _suite_patterns() -> set[str]:
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            if isinstance(node.get("patternProperties"), dict):
                found.update(node["patternProperties"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    if SUITE.is_dir():
        for path in SUITE.rglob("*.json"):
            walk(json.loads(path.read_text(encoding="utf-8")))
    return found


def test_dfa_agrees_with_re_on_random_strings():
    rng = random.Random(13)
    checked = 0
    for pattern in sorted(set(HAND) | _suite_patterns()):
        try:
            compiled = compile_re(pattern)
            dfa = build_dfa(parse(compiled.pattern))
        except (schema.SchemaError, ValueError, Unsupported):
            continue
        alphabet = sorted(set(pattern) | set("ab 1_\n\u00e9x-.@"))
        for _ in range(200):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
            assert dfa(text) == (compiled.search(text) is not None), (pattern, text)
        checked += 1
    assert checked >= len(HAND)


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1", "[^\\S]"])
def test_lookarounds_and_backreferences_are_left_to_re(pattern):
    with pytest.raises(Unsupported):
        build_dfa(parse(compile_re(pattern).pattern))


def test_dfa_is_linear_in_the_input():
    search = build_dfa(parse(compile_re("^(\\w+\\s?)*$").pattern))
    text = "ab cd ef " * 20000 + "!"
    ok, elapsed = _timed(search, text)
    assert ok is False and elapsed < 1.0
    assert search("ab cd ef " * 20000) is True
