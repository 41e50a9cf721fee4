"""Docstrings split into a description and per-parameter texts (Google, NumPy, reST).

A tool's description is what the model reads to decide when to call it, and each
parameter's text is what it reads to fill the argument in; the parameter section is
taken out of the description so the text is not repeated.
"""

from __future__ import annotations

import inspect
import re
from typing import Optional

__all__ = ["parse_docstring"]

_GOOGLE_SECTIONS = frozenset({
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
    "kwargs", "other parameters", "attributes",
})
_GOOGLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^\*{0,2}(\w+)(?:\s*,\s*\*{0,2}\w+)*\s*(?::\s*(.*))?$")
_REST_FIELD = re.compile(r"^:(\w+)(?:\s+([^:]+?))?:\s*(.*)$")
_NUMPY_PARAM_SECTIONS = frozenset(
    {"parameters", "other parameters", "attributes", "keyword arguments"}
)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(parts: list[str]) -> str:
    return " ".join(p.strip() for p in parts if p.strip())


def _google(lines: list[str], params: dict[str, str]) -> list[str]:
    kept: list[str] = []
    i = 0
    while i < len(lines):
        header = _GOOGLE_HEADER.match(lines[i])
        if not header or header.group(1).strip().lower() not in _GOOGLE_SECTIONS:
            kept.append(lines[i])
            i += 1
            continue
        base = _indent(lines[i])
        i += 1
        name: Optional[str] = None
        item_indent = None
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            match = _GOOGLE_ITEM.match(line.strip())
            if match and (item_indent is None or _indent(line) <= item_indent):
                item_indent = _indent(line)
                name = match.group(1)
                params[name] = match.group(3).strip()
            elif name is not None:
                params[name] = _join([params[name], line])
    return kept


def _numpy(lines: list[str], params: dict[str, str]) -> list[str]:
    kept: list[str] = []
    i = 0
    while i < len(lines):
        is_header = (
            i + 1 < len(lines)
            and lines[i].strip()
            and set(lines[i + 1].strip()) == {"-"}
            and len(lines[i + 1].strip()) >= 3
        )
        if not is_header or lines[i].strip().lower() not in _NUMPY_PARAM_SECTIONS:
            kept.append(lines[i])
            i += 1
            continue
        base = _indent(lines[i])
        i += 2
        name: Optional[str] = None
        while i < len(lines):
            line = lines[i]
            starts_section = (
                i + 1 < len(lines) and line.strip() and set(lines[i + 1].strip()) == {"-"}
            )
            if starts_section:
                break
            i += 1
            if not line.strip():
                continue
            match = _NUMPY_ITEM.match(line.strip())
            if _indent(line) <= base and match:
                name = match.group(1)
                params[name] = ""
            elif name is not None:
                params[name] = _join([params[name], line])
    return kept


def _rest(lines: list[str], params: dict[str, str]) -> list[str]:
    kept: list[str] = []
    name: Optional[str] = None
    for line in lines:
        field = _REST_FIELD.match(line.strip())
        if field:
            kind, arg, text = field.groups()
            name = None
            if kind in ("param", "parameter", "arg", "argument", "key", "keyword") and arg:
                name = arg.split()[-1]
                params[name] = text.strip()
                continue
            if kind in ("type", "vartype"):
                continue
        elif name is not None and line.strip() and _indent(line) > 0:
            params[name] = _join([params[name], line])
            continue
        else:
            name = None
        kept.append(line)
    return kept


def parse_docstring(doc: Optional[str]) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: text})``; the description keeps all but parameter sections."""
    if not doc or not doc.strip():
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    for style in (_rest, _numpy, _google):
        lines = style(lines, params)
    text = "\n".join(lines).strip()
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text, params
