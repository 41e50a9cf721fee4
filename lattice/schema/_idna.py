"""Host names: RFC 1123 syntax, and IDNA 2008 (RFC 5890-5893) labels, approximately.

The stdlib only has IDNA 2003, so the IDNA 2008 rules that matter in practice are
written out here: the derived PVALID property approximated from ``unicodedata``, the
listed exceptions, the CONTEXTJ/CONTEXTO rules, and the Bidi rule. Script membership
comes from character names, since ``unicodedata`` has no script property.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["hostname_ok", "idn_hostname_ok"]

_LDH = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_SEPARATORS = re.compile("[.\u3002\uff0e\uff61]")
_PVALID = frozenset("\u00df\u03c2\u06fd\u06fe\u0f0b\u3007")
_DISALLOWED = frozenset("\u0640\u07fa\u302e\u302f\u3031\u3032\u3033\u3034\u3035\u303b")
_ALLOWED_CATEGORIES = frozenset({"Ll", "Lo", "Lm", "Mn", "Mc", "Nd"})
_RTL = frozenset({"R", "AL", "AN"})


def _script(ch: str, *prefixes: str) -> bool:
    return unicodedata.name(ch, "").startswith(prefixes)


def _pvalid(ch: str) -> bool:
    if ch in _PVALID:
        return True
    if ch in _DISALLOWED:
        return False
    if ch.isascii():
        return ch.isalnum() or ch == "-"
    stable = unicodedata.normalize("NFKC", ch.casefold()) == ch
    return stable and unicodedata.category(ch) in _ALLOWED_CATEGORIES


def _joining(ch: str) -> bool:
    return _script(ch, "ARABIC LETTER", "SYRIAC LETTER", "NKO LETTER", "MONGOLIAN LETTER")


def _context_ok(label: str, i: int) -> bool:
    ch = label[i]
    before = label[i - 1] if i else ""
    after = label[i + 1] if i + 1 < len(label) else ""
    if ch == "\u200d":  # ZERO WIDTH JOINER: after a virama only
        return bool(before) and unicodedata.combining(before) == 9
    if ch == "\u200c":  # ZERO WIDTH NON-JOINER: after a virama, or between joining letters
        if before and unicodedata.combining(before) == 9:
            return True
        left = next((c for c in reversed(label[:i]) if unicodedata.category(c) != "Mn"), "")
        right = next((c for c in label[i + 1:] if unicodedata.category(c) != "Mn"), "")
        return bool(left and right) and _joining(left) and _joining(right)
    if ch == "\u00b7":  # MIDDLE DOT: only in "l·l" (Catalan)
        return before == "l" and after == "l"
    if ch == "\u0375":  # GREEK KERAIA: before a Greek character
        return bool(after) and _script(after, "GREEK")
    if ch in "\u05f3\u05f4":  # HEBREW GERESH / GERSHAYIM: after a Hebrew character
        return bool(before) and _script(before, "HEBREW")
    if ch == "\u30fb":  # KATAKANA MIDDLE DOT: with some Hiragana, Katakana or Han
        return any(
            c != "\u30fb" and _script(c, "HIRAGANA", "KATAKANA", "CJK UNIFIED") for c in label
        )
    if "\u0660" <= ch <= "\u0669":
        return not any("\u06f0" <= c <= "\u06f9" for c in label)
    if "\u06f0" <= ch <= "\u06f9":
        return not any("\u0660" <= c <= "\u0669" for c in label)
    return _pvalid(ch)


def _bidi_ok(label: str) -> bool:
    """RFC 5893 section 2, applied to every label of a domain that has an RTL label."""
    classes = [unicodedata.bidirectional(c) for c in label]
    trimmed = classes[:]
    while trimmed and trimmed[-1] == "NSM":
        trimmed.pop()
    if not trimmed:
        return False
    if classes[0] in ("R", "AL"):
        allowed = {"R", "AL", "AN", "EN", "ES", "CS", "ET", "ON", "BN", "NSM"}
        return (
            set(classes) <= allowed
            and trimmed[-1] in ("R", "AL", "EN", "AN")
            and not ("EN" in classes and "AN" in classes)
        )
    if classes[0] != "L":
        return False
    allowed = {"L", "EN", "ES", "CS", "ET", "ON", "BN", "NSM"}
    return set(classes) <= allowed and trimmed[-1] in ("L", "EN")


def _u_label_ok(label: str) -> bool:
    if not label or label.startswith("-") or label.endswith("-") or label[2:4] == "--":
        return False
    if unicodedata.category(label[0]).startswith("M"):
        return False
    if unicodedata.normalize("NFC", label) != label:
        return False
    return all(_context_ok(label, i) for i in range(len(label)))


def _to_unicode(label: str) -> str:
    """A label as Unicode; raises ``ValueError`` for a malformed A-label."""
    if not label[:4].lower() == "xn--":
        return label
    try:
        decoded = label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError):
        raise ValueError("bad punycode") from None
    if decoded.isascii() or decoded.encode("punycode").decode("ascii") != label[4:].lower():
        raise ValueError("not a canonical A-label")
    return decoded


def _labels_ok(labels: list[str], ascii_only: bool) -> bool:
    unicode_labels = []
    ascii_length = 0
    for label in labels:
        if not label:
            return False
        if ascii_only and _LDH.fullmatch(label) is None:
            return False
        try:
            u = _to_unicode(label)
        except ValueError:
            return False
        if u.isascii():
            if _LDH.fullmatch(u) is None or u[2:4] == "--":
                return False
            ascii_length += len(u) + 1
        else:
            if not _u_label_ok(u):
                return False
            a_label = "xn--" + u.encode("punycode").decode("ascii")
            if len(a_label) > 63:
                return False
            ascii_length += len(a_label) + 1
        unicode_labels.append(u)
    if ascii_length - 1 > 253:
        return False
    if any(unicodedata.bidirectional(c) in _RTL for u in unicode_labels for c in u):
        return all(_bidi_ok(u) for u in unicode_labels)
    return True


def hostname_ok(text: str) -> bool:
    """An ASCII host name (labels may be IDNA A-labels, ``xn--...``)."""
    return bool(text) and text.isascii() and _labels_ok(text.split("."), ascii_only=True)


def idn_hostname_ok(text: str) -> bool:
    """An internationalised host name (U-labels or A-labels, any IDNA full stop)."""
    return bool(text) and _labels_ok(_SEPARATORS.split(text), ascii_only=False)
