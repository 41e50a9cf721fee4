"""Adapter for ../shared/tools/jsonschema_suite.py, which calls validators schema-first.

Also home of ``needs_remote``, shared by tests/schema/test_suite.py and bench/schema_bench.py.
"""

from urllib.parse import urldefrag, urljoin

from lattice import schema

REMOTE = "http://localhost:1234/"


def check(schema_, instance, draft=None, format_assertion=False):
    return schema.is_valid(instance, schema_, draft=draft, format_checker=format_assertion)


def build(schema_, draft=None, format_assertion=False):
    return schema.compile(schema_, draft=draft, format_checker=format_assertion).is_valid


def needs_remote(node, draft):
    """Whether a schema points at a localhost:1234 document that it does not define itself."""
    defined: set[str] = set()
    wanted: set[str] = set()

    def walk(n, base):
        if isinstance(n, list):
            for item in n:
                walk(item, base)
        elif isinstance(n, dict):
            if isinstance(n.get("$id"), str) and not (draft == "7" and "$ref" in n):
                base = urldefrag(urljoin(base, n["$id"]))[0] or base
                defined.add(base)
            for key in ("$ref", "$dynamicRef", "$schema"):
                if isinstance(n.get(key), str):
                    wanted.add(urldefrag(urljoin(base, n[key]))[0])
            for key, value in n.items():
                if key not in ("enum", "const", "default", "examples"):
                    walk(value, base)

    walk(node, "")
    return any(uri.startswith(REMOTE) and uri not in defined for uri in wanted)
