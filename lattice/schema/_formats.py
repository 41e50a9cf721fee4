"""Format checkers, used only when format assertion is asked for (``format_checker=True``).

One predicate per format name, ``str -> bool``; non-strings never reach them (``format``
applies to strings only). Dates and times follow RFC 3339, URIs RFC 3986 (IRIs RFC 3987,
loosely), e-mail RFC 5321 (with RFC 6531 for ``idn-email``), host names RFC 1123 with
IDNA 2008 for ``xn--`` labels (see ``_idna``). This module is imported on first use.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Callable, Optional

from ._idna import hostname_ok, idn_hostname_ok
from ._regex import RegexError, compile_re

__all__ = ["checker_for", "FORMATS"]

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(
    r"(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:([zZ])|([+-])(\d{2}):(\d{2}))", re.ASCII
)
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_date(text: str) -> bool:
    m = _DATE.fullmatch(text)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups())
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= _DAYS[month - 1] + (month == 2 and leap)


def is_time(text: str) -> bool:
    m = _TIME.fullmatch(text)
    if m is None:
        return False
    hour, minute, second = int(m[1]), int(m[2]), int(m[3])
    off_h, off_m = (int(m[6]), int(m[7])) if m[5] else (0, 0)
    if hour > 23 or minute > 59 or second > 60 or off_h > 23 or off_m > 59:
        return False
    if second == 60:  # a leap second happens at 23:59:60 UTC only
        sign = -1 if m[5] == "-" else 1
        utc = (hour * 60 + minute - sign * (off_h * 60 + off_m)) % 1440
        return utc == 23 * 60 + 59
    return True


def is_date_time(text: str) -> bool:
    date, sep, time = text[:10], text[10:11], text[11:]
    return sep in ("T", "t") and is_date(date) and is_time(time)


# RFC 3339 appendix A: units in order, and no gaps (years then days needs months too).
_DURATION = re.compile(
    r"P(?:\d+W|(?:\d+Y(?:\d+M(?:\d+D)?)?|\d+M(?:\d+D)?|\d+D)(?:T{t})?|T{t})".format(
        t=r"(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)"
    ),
    re.ASCII,
)


def is_duration(text: str) -> bool:
    return _DURATION.fullmatch(text) is not None


# -- internet addresses -----------------------------------------------------------------


def is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(
        p.isascii() and p.isdigit() and (p == "0" or not p.startswith("0")) and int(p) <= 255
        for p in parts
    )


def is_ipv6(text: str) -> bool:
    if not text.isascii() or "%" in text or not re.fullmatch(r"[0-9A-Fa-f:.]+", text):
        return False
    if "." in text and not is_ipv4(text.rsplit(":", 1)[-1]):
        return False  # the stdlib accepts leading zeros in the embedded IPv4 part
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


_U = r"A-Za-z0-9\-._~"
_SD = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_U}{_SD}:@]|{_PCT})"
_SEGS = rf"(?:/{_PCHAR}*)*"
_USERINFO = rf"(?:(?:[{_U}{_SD}:]|{_PCT})*@)?"
_HOST = rf"(?:\[[^\]/?#@]*\]|(?:[{_U}{_SD}]|{_PCT})*)"
_AUTHORITY = rf"{_USERINFO}{_HOST}(?::[0-9]*)?"
_QF = rf"(?:{_PCHAR}|[/?])*"
_TAIL = rf"(?:\?{_QF})?(?:#{_QF})?"
_ABSOLUTE = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*:(?://{_AUTHORITY}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|{_PCHAR}+{_SEGS}|){_TAIL}"
)
_RELATIVE = re.compile(
    rf"(?://{_AUTHORITY}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|(?:[{_U}{_SD}@]|{_PCT})+{_SEGS}|){_TAIL}"
)
_IP_LITERAL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//(?:[^/?#@]*@)?\[([^\]]*)\]")
_IPV_FUTURE = re.compile(rf"[vV][0-9A-Fa-f]+\.[{_U}{_SD}:]+")


def _ip_literal_ok(text: str) -> bool:
    m = _IP_LITERAL.match(text)
    return m is None or is_ipv6(m[1]) or _IPV_FUTURE.fullmatch(m[1]) is not None


def _iri_to_uri(text: str) -> str:
    # Every non-ASCII character becomes a percent-encoded octet: the IRI grammar allows them
    # wherever URI syntax allows unreserved characters, which is where %XX may appear too.
    return "".join(c if c < "\x80" else "%AA" for c in text)


def is_uri(text: str) -> bool:
    return _ABSOLUTE.fullmatch(text) is not None and _ip_literal_ok(text)


def is_uri_reference(text: str) -> bool:
    matched = _ABSOLUTE.fullmatch(text) or _RELATIVE.fullmatch(text)
    return matched is not None and _ip_literal_ok(text)


def is_iri(text: str) -> bool:
    return is_uri(_iri_to_uri(text))


def is_iri_reference(text: str) -> bool:
    return is_uri_reference(_iri_to_uri(text))


_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~\-"
_LOCAL = re.compile(rf'(?:[{_ATEXT}]+(?:\.[{_ATEXT}]+)*|"(?:[^"\\\r\n]|\\.)*")', re.S)
_IDN_ATEXT = _ATEXT + r"\x80-\U0010ffff"
_IDN_LOCAL = re.compile(rf'(?:[{_IDN_ATEXT}]+(?:\.[{_IDN_ATEXT}]+)*|"(?:[^"\\\r\n]|\\.)*")', re.S)


def _email(text: str, local_re: re.Pattern[str], host: Callable[[str], bool]) -> bool:
    local, at, domain = text.rpartition("@")
    if not at or not local or local_re.fullmatch(local) is None:
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        return is_ipv6(literal[5:]) if literal.lower().startswith("ipv6:") else is_ipv4(literal)
    return host(domain)


def is_email(text: str) -> bool:
    return _email(text, _LOCAL, hostname_ok)


def is_idn_email(text: str) -> bool:
    # RFC 6531 does not ask for NFC; IDNA does, so the domain is normalised first.
    return _email(text, _IDN_LOCAL, lambda h: idn_hostname_ok(unicodedata.normalize("NFC", h)))


# -- other string formats ---------------------------------------------------------------

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_POINTER = r"(?:/(?:[^/~]|~[01])*)*"
_JSON_POINTER = re.compile(_POINTER, re.S)
_RELATIVE_POINTER = re.compile(rf"(?:0|[1-9][0-9]*)(?:#|{_POINTER})", re.S)
_VARNAME = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*"
_VARSPEC = rf"{_VARNAME}(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION = rf"\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}}"
_LITERAL = r"(?:[^\x00-\x20\x7f\"'%<>\\^`{|}]|%[0-9A-Fa-f]{2}|')"
_URI_TEMPLATE = re.compile(rf"(?:{_LITERAL}|{_EXPRESSION})*")


def is_regex(text: str) -> bool:
    try:
        compile_re(text)  # uncached: model-provided text must not crowd out schema patterns
    except RegexError:
        return False
    return True


FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": is_date_time,
    "date": is_date,
    "time": is_time,
    "duration": is_duration,
    "email": is_email,
    "idn-email": is_idn_email,
    "hostname": hostname_ok,
    "idn-hostname": idn_hostname_ok,
    "ipv4": is_ipv4,
    "ipv6": is_ipv6,
    "uri": is_uri,
    "uri-reference": is_uri_reference,
    "iri": is_iri,
    "iri-reference": is_iri_reference,
    "uuid": lambda text: _UUID.fullmatch(text) is not None,
    "regex": is_regex,
    "json-pointer": lambda text: _JSON_POINTER.fullmatch(text) is not None,
    "relative-json-pointer": lambda text: _RELATIVE_POINTER.fullmatch(text) is not None,
    "uri-template": lambda text: _URI_TEMPLATE.fullmatch(text) is not None,
}


def checker_for(name: str) -> Optional[Callable[[str], bool]]:
    """The predicate for a format name, ``None`` for formats this package does not know."""
    return FORMATS.get(name)
