"""ECMA-262 pattern translation and the opt-in format checkers of lattice.schema."""

from __future__ import annotations

import pytest

from lattice import schema
from lattice.schema._formats import FORMATS
from lattice.schema._regex import RegexError, compile_pattern, translate


def matches(pattern: str, text: str) -> bool:
    return schema.is_valid(text, {"pattern": pattern})


# -- patterns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("^\\p{Letter}+$", "Hello", True),
        ("^\\p{Letter}+$", "\u03c0\u00e9\u4e2d", True),
        ("^\\p{Letter}+$", "123", False),
        ("^\\p{L}+$", "abc", True),
        ("^\\p{Lu}+$", "ABC", True),
        ("^\\p{Lu}+$", "AbC", False),
        ("^\\p{Ll}$", "\u00e9", True),
        ("^\\p{N}+$", "12\u00bd", True),
        ("^\\p{Nd}+$", "\u09ea\u09e8", True),
        ("^\\p{digit}+$", "42", True),
        ("^\\P{L}+$", "123", True),
        ("^\\P{L}+$", "a", False),
        ("^\\p{gc=Lu}$", "A", True),
        ("^[\\p{L}\\d_]+$", "\u00e9t\u00e9_2", True),
        ("^[^\\p{L}]+$", "12", True),
        ("^\\d+$", "123", True),
        ("^\\d+$", "\u0661\u0662", False),  # ECMA \d is ASCII only
        ("^\\w+$", "abc_1", True),
        ("^\\w+$", "\u00e9", False),  # ECMA \w is ASCII only
        ("^\\W$", "\u00e9", True),
        ("\\bfoo\\b", "a foo b", True),
        ("^\\s$", "\ufeff", True),  # ECMA \s includes the BOM ...
        ("^\\s$", "\x1c", False),  # ... and not the information separators
        ("^\\S$", "\u00a0", False),
        ("^abc$", "abc\n", False),  # $ never matches before a trailing newline
        ("^.$", "\u2028", False),
        ("^\\cC$", "\x03", True),
        ("^\\u{1F600}$", "\U0001f600", True),
        ("^\\uD83D\\uDE00$", "\U0001f600", True),
        ("^(?<year>\\d{4})-\\k<year>$", "2024-2024", True),
        ("^[\\D]$", "a", True),
        ("^[a\\D]$", "1", False),
        ("^[^\\S]$", " ", True),
        ("a/b", "a/b", True),
        ("^\\/$", "/", True),
        ("[]", "anything", False),
        ("^[^]$", "\n", True),
        ("^[&~|]+$", "&~|", True),
    ],
)
def test_ecma_patterns(pattern: str, text: str, expected: bool) -> None:
    assert matches(pattern, text) is expected


def test_pattern_properties_use_the_same_translation() -> None:
    s = {
        "type": "object",
        "patternProperties": {"^\\p{Letter}+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert schema.is_valid({"\u00e9t\u00e9": 1}, s)
    assert not schema.is_valid({"123": 1}, s)


@pytest.mark.parametrize(
    "bad", ["(", "\\p{Nope}", "\\p{Script=Greek}", "(?P<x>a)", "(?i)a", "(?#c)", "\\a", "\\Z", "[a"]
)
def test_invalid_or_python_only_patterns_are_rejected(bad: str) -> None:
    with pytest.raises(RegexError):
        compile_pattern(bad)
    with pytest.raises(schema.SchemaError):
        schema.compile({"pattern": bad})


def test_translation_is_plain_re_syntax() -> None:
    assert translate("^\\d$") == "^[0-9]\\Z"
    assert translate("(?<n>x)") == "(?P<n>x)"
    assert translate("[\\w-]") == "[A-Za-z0-9_-]"


def test_import_builds_no_unicode_tables() -> None:
    import subprocess
    import sys

    code = (
        "import lattice.schema, lattice.schema._regex as r; "
        "assert r._ranges_by_category is None; "
        "import sys; assert 'lattice.schema._formats' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- formats -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        (
            "date-time",
            ["2024-02-29T12:00:00Z", "1998-12-31T23:59:60Z", "2024-01-01t10:00:00.5+05:30"],
            ["2023-02-29T12:00:00Z", "2024-01-01 10:00:00Z", "2024-01-01T10:00:00"],
        ),
        (
            "date",
            ["2024-02-29", "2000-02-29"],
            ["1900-02-29", "2024-13-01", "2024-1-01", "2024-01-0\u0661"],
        ),
        (
            "time",
            ["08:30:06Z", "23:59:60Z", "08:30:06.25-08:00"],
            ["24:00:00Z", "12:00:00", "22:59:60Z"],
        ),
        (
            "email",
            ["joe.bloggs@example.com", '"joe bloggs"@example.com', "a@[127.0.0.1]"],
            ["joe..bloggs@example.com", "@example.com", "joe@", "a b@example.com"],
        ),
        (
            "uri",
            ["http://example.com/a?b#c", "urn:isbn:0451450523", "mailto:a@b.c"],
            ["/relative", "http://exa mple.com", "1http://x"],
        ),
        ("uri-reference", ["/relative", "#frag", ""], ["\\\\bad", "/%zz"]),
        (
            "uuid",
            ["2eb8aa08-aa98-11ea-b4aa-73b441d16380"],
            ["2eb8aa08aa9811eab4aa73b441d16380", "zz"],
        ),
        ("ipv4", ["192.168.0.1", "0.0.0.0"], ["256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.\u0664"]),
        (
            "ipv6",
            ["::1", "1:2:3:4:5:6:7:8", "::ffff:192.168.0.1"],
            ["12345::", "1::2::3", "fe80::1%eth0"],
        ),
        (
            "hostname",
            ["www.example.com", "xn--9n2bp8q.xn--9t4b11yi5a"],
            ["-a.com", "a_b.com", "example."],
        ),
        (
            "idn-hostname",
            ["\uc2e4\ub840.\ud14c\uc2a4\ud2b8", "a\uff0eb"],
            ["\u302e\uc2e4\ub840", "-x"],
        ),
        ("duration", ["P4DT12H30M5S", "P1W", "PT0S"], ["P", "PT", "P1D2H", "P1YT"]),
        ("json-pointer", ["", "/a/b~0c/~1"], ["a", "/~2"]),
        ("relative-json-pointer", ["0", "1/a", "0#"], ["/a", "01", "-1"]),
        ("regex", ["^a+$", "\\p{L}"], ["(", "(?P<x>a)"]),
        ("uri-template", ["http://example.com/{term:1}/{term}", ""], ["{", "{a,}"]),
        ("iri", ["http://\u0192\u00f8\u00f8.com/\u00e9"], ["/abc"]),
        ("idn-email", ["\uc2e4\ub840@\uc2e4\ub840.\ud14c\uc2a4\ud2b8"], ["2962"]),
    ],
)
def test_formats(name: str, good: list[str], bad: list[str]) -> None:
    check = FORMATS[name]
    assert [g for g in good if not check(g)] == []
    assert [b for b in bad if check(b)] == []
    assert schema.is_valid(good[0], {"format": name}, format_checker=True)
    assert not schema.is_valid(bad[0], {"format": name}, format_checker=True)
    assert schema.is_valid(bad[0], {"format": name})  # annotation only by default
