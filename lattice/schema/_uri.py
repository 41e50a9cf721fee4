"""URI references (RFC 3986 section 5) and JSON pointers (RFC 6901), without the network.

``urllib.parse.urljoin`` only joins schemes it knows to be hierarchical, so ``urn:`` and
``tag:`` identifiers (common in schemas) would come back unjoined; hence a small resolver.
"""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["resolve_uri", "split_fragment", "pointer_segments"]

# RFC 3986 appendix B: scheme, authority, path, query, fragment.
_PARTS = re.compile(
    r"^(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$", re.S
)


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    for seg in path.split("/"):
        if seg == "..":
            if len(out) > 1 or (out and out[0] != ""):
                out.pop()
        elif seg != ".":
            out.append(seg)
    if path.endswith(("/.", "/..")):
        out.append("")
    result = "/".join(out)
    if path.startswith("/") and not result.startswith("/"):
        result = "/" + result
    return result


def _unsplit(
    scheme: Optional[str], auth: Optional[str], path: str, query: Optional[str], frag: Optional[str]
) -> str:
    text = f"{scheme}:" if scheme is not None else ""
    if auth is not None:
        text += f"//{auth}"
    text += path
    if query is not None:
        text += f"?{query}"
    if frag:
        text += f"#{frag}"
    return text


def resolve_uri(base: str, ref: str) -> str:
    """Resolve ``ref`` against ``base``; an empty trailing fragment (``x#``) is dropped."""
    m = _PARTS.match(ref)
    b = _PARTS.match(base)
    if m is None or b is None:  # pragma: no cover - the pattern matches any string
        return ref
    scheme, auth, path, query, frag = m.groups()
    bscheme, bauth, bpath, bquery, _ = b.groups()
    if scheme is not None:
        return _unsplit(scheme, auth, _remove_dot_segments(path), query, frag)
    if auth is not None:
        return _unsplit(bscheme, auth, _remove_dot_segments(path), query, frag)
    if not path:
        return _unsplit(bscheme, bauth, bpath, query if query is not None else bquery, frag)
    if path.startswith("/"):
        return _unsplit(bscheme, bauth, _remove_dot_segments(path), query, frag)
    if bauth is not None and not bpath:
        merged = "/" + path
    else:
        merged = bpath[: bpath.rfind("/") + 1] + path
    if bscheme is None and bauth is None and not merged.startswith("/"):
        # A relative base (a schema without an absolute $id): keep it relative.
        return _unsplit(None, None, _remove_dot_segments("/" + merged)[1:], query, frag)
    return _unsplit(bscheme, bauth, _remove_dot_segments(merged), query, frag)


_ESCAPES = re.compile(r"((?:%[0-9A-Fa-f]{2})+)")


def percent_decode(text: str) -> str:
    """``%25`` -> ``%``; runs of escapes are decoded together as UTF-8."""
    if "%" not in text:
        return text
    parts = _ESCAPES.split(text)
    for i in range(1, len(parts), 2):
        parts[i] = bytes.fromhex(parts[i].replace("%", "")).decode("utf-8", "replace")
    return "".join(parts)


def split_fragment(uri: str) -> tuple[str, str]:
    """``("http://x/s.json", "/defs/a")`` from ``"http://x/s.json#/defs/a"``; percent-decoded."""
    doc, sep, frag = uri.partition("#")
    return doc, percent_decode(frag) if sep else ""


def pointer_segments(pointer: str) -> list[str]:
    """The reference tokens of a JSON pointer such as ``/a~1b/0`` (``["a/b", "0"]``)."""
    if not pointer:
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"a JSON pointer must start with '/': {pointer!r}")
    return [s.replace("~1", "/").replace("~0", "~") for s in pointer[1:].split("/")]
