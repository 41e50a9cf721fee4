"""The client the MCP conformance suite drives (``@modelcontextprotocol/conformance``).

The suite starts a scenario server, runs ``python conformance_client.py <server-url>``
with ``MCP_CONFORMANCE_SCENARIO`` (the scenario's name), ``MCP_CONFORMANCE_PROTOCOL_VERSION``
(the revision to speak) and, for some, ``MCP_CONFORMANCE_CONTEXT`` (JSON: a pre-registered
client, a private key), and judges what it saw on the wire. This script uses only
lattice's public API, as an application would: one ``MCPServerHTTP``, an ``OAuth`` for the
``auth/*`` scenarios, an ``on_elicitation`` callable. It exits 0 when its calls worked.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, Dict, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

import requests

from lattice.mcp import MCPError, MCPServerHTTP, OAuth

REDIRECT_URI = "http://localhost:3000/callback"
# The suite's authorization servers accept this URL as a client ID metadata document.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def follow_authorization(url: str) -> Tuple[str, ...]:
    """The user's part of the authorization code flow: the suite's authorization server
    approves at once, so fetching the URL answers with the redirect carrying the code."""
    response = requests.get(url, allow_redirects=False, timeout=10)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise RuntimeError(f"expected a redirect from the authorization URL, got "
                           f"{response.status_code}")
    query = parse_qs(urlsplit(location).query)
    if "code" not in query:
        raise RuntimeError(f"the redirect carries no code: {sorted(query)}")
    state = query.get("state", [""])[0]
    if "iss" in query:
        return query["code"][0], state, query["iss"][0]
    return query["code"][0], state


def accept_with_defaults(request: Any) -> Dict[str, Any]:
    """Accept every elicitation, filling each field with its schema's default."""
    if request.mode != "form":
        return {"action": "accept"}
    properties = (request.requested_schema or {}).get("properties") or {}
    return {"action": "accept",
            "content": {name: spec["default"] for name, spec in properties.items()
                        if isinstance(spec, dict) and "default" in spec}}


def make_auth(scenario: str, context: Dict[str, Any]) -> Optional[OAuth]:
    if not scenario.startswith("auth/"):
        return None
    if scenario.startswith("auth/client-credentials"):
        return OAuth(grant="client_credentials", client_id=context.get("client_id"),
                     client_secret=context.get("client_secret"),
                     private_key=context.get("private_key_pem"))
    return OAuth(redirect_handler=follow_authorization, redirect_uri=REDIRECT_URI,
                 client_id=context.get("client_id"),
                 client_secret=context.get("client_secret"),
                 client_metadata_url=None if context.get("client_id") else CLIENT_METADATA_URL)


# The tool each scenario expects to be called, and its arguments; others call the first.
TOOL_CALLS = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}


def run(url: str, scenario: str, version: Optional[str], context: Dict[str, Any]) -> None:
    server = MCPServerHTTP(url, auth=make_auth(scenario, context), protocol_version=version,
                           on_elicitation=accept_with_defaults, timeout_ms=20000)
    with server:
        tools = server.list_tools()
        if scenario == "initialize":
            return
        if context.get("toolCalls"):  # the scenario says which calls to make
            for wanted in context["toolCalls"]:
                call(server, wanted["name"], wanted.get("arguments") or {})
            return
        if scenario == "json-schema-2020-12-preservation":
            # The schema as lattice hands it to a model, sent back for the suite to compare.
            seen = {tool.name: tool.input_schema for tool in server.tools()}
            call(server, next(n for n in seen if n != "json_schema_2020_12_tool"),
                 {"schema": seen["json_schema_2020_12_tool"]})
            return
        name, arguments = TOOL_CALLS.get(scenario, (None, {}))
        names = [t["name"] for t in tools]
        if name is None or name not in names:
            if not names:
                return
            name, arguments = names[0], context.get("tool_arguments") or {}
            if scenario.startswith("http-") or scenario in ("request-metadata",
                                                             "sep-2322-client-request-state"):
                for tool in tools:  # the header scenarios look at every tool's call
                    call(server, tool["name"], example_arguments(tool))
                return
        call(server, name, arguments)


def example_arguments(tool: Dict[str, Any]) -> Dict[str, Any]:
    """Arguments that satisfy a tool's schema: each required property's example value."""
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    samples = {"string": "value", "integer": 1, "number": 1, "boolean": True,
               "array": [], "object": {}}
    return {name: spec.get("default", samples.get(str(spec.get("type")), "value"))
            for name, spec in properties.items() if isinstance(spec, dict)
            and name in (schema.get("required") or [])}


def call(server: MCPServerHTTP, name: str, arguments: Dict[str, Any]) -> None:
    try:
        result = server.call_tool(name, arguments)
        logging.info("%s -> %s", name, result.content)
    except MCPError as exc:  # a refusal the scenario provoked is its business
        logging.info("%s failed: %s", name, exc)


def main() -> int:
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    run(url, scenario, version, context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
