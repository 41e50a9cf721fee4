"""Adapter for ../shared/tools/jsonschema_suite.py, which calls validators schema-first."""

from lattice import schema


def check(schema_, instance, draft=None, format_assertion=False):
    return schema.is_valid(instance, schema_, draft=draft, format_checker=format_assertion)


def build(schema_, draft=None, format_assertion=False):
    return schema.compile(schema_, draft=draft, format_checker=format_assertion).is_valid
