"""A deliberately broken MCP stdio server, for tests/mcp/test_faults.py.

    python tests/mcp/broken_server.py MODE

It answers ``initialize`` (with the protocol version it is told, default 2025-06-18) and
``tools/list`` (one tool, ``work``) properly, then misbehaves on ``tools/call`` as MODE says:

- ``exit``: writes to stderr, exits with code 3 (mid-call).
- ``silent``: never answers (each call and cancellation is noted on stderr).
- ``garbage``: writes lines that are not JSON instead of an answer.
- ``huge``: answers with ``arguments["size"]`` bytes of text on one line.
- ``child``: starts a grandchild that sleeps (its pid on stderr), then never answers.
- ``stubborn``: ignores SIGTERM and the end of stdin, never answers.
- ``ask``: sends the client a ``ping`` and an unknown request first, then answers with
  what the client replied.
- ``hang_start``: never answers ``initialize``.
- ``version:V``: answers ``initialize`` with protocol version V, then behaves.
- ``deep``: answers with content nested ``arguments["depth"]`` levels deep when that is
  over 100 (written as text: too deep for ``json`` to write), else with "fine".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Optional

MODE = sys.argv[1] if len(sys.argv) > 1 else "silent"
TOOL = {"name": "work", "description": "Does work.",
        "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}}}


def send(message: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read() -> Optional[Dict[str, Any]]:
    line = sys.stdin.readline()
    if not line:
        return None
    return json.loads(line)


def reply(request_id: Any, result: Dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def ask_client(request_id: Any) -> None:
    send({"jsonrpc": "2.0", "id": "p1", "method": "ping"})
    send({"jsonrpc": "2.0", "id": "p2", "method": "sampling/createMessage", "params": {}})
    answers = {}
    while len(answers) < 2:
        message = read()
        if message is None:
            return
        if message.get("id") in ("p1", "p2"):
            answers[message["id"]] = message
    text = json.dumps([answers["p1"].get("result"), answers["p2"].get("error", {}).get("code")])
    reply(request_id, {"content": [{"type": "text", "text": text}]})


def call(request_id: Any, args: Dict[str, Any]) -> None:
    if MODE == "silent":  # the test may wait for this line: the call is now pending
        sys.stderr.write(f"call {request_id}\n")
        sys.stderr.flush()
    if MODE == "exit":
        sys.stderr.write("fatal: out of cheese\n")
        sys.stderr.flush()
        sys.exit(3)
    if MODE == "garbage":
        print("Traceback (most recent call last): not JSON", flush=True)
        print("{not json either", flush=True)
    elif MODE == "huge":
        reply(request_id, {"content": [{"type": "text", "text": "x" * int(args["size"])}]})
    elif MODE == "child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        sys.stderr.write(f"child {child.pid}\n")
        sys.stderr.flush()
    elif MODE == "ask":
        ask_client(request_id)
    elif MODE == "deep" and int(args.get("depth", 0)) > 100:
        depth = int(args["depth"])
        head = '{"jsonrpc": "2.0", "id": ' + json.dumps(request_id) + ', "result": {"content": '
        sys.stdout.write(head + "[" * depth + "]" * depth + "}}\n")
        sys.stdout.flush()
    elif MODE.startswith("version:") or MODE == "deep":
        reply(request_id, {"content": [{"type": "text", "text": "fine"}]})


def main() -> None:
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    version = MODE.split(":", 1)[1] if MODE.startswith("version:") else "2025-06-18"
    while True:
        message = read()
        if message is None:
            break
        method = message.get("method")
        if method == "initialize" and MODE != "hang_start":
            reply(message["id"], {"protocolVersion": version, "capabilities": {"tools": {}},
                                  "serverInfo": {"name": "broken", "version": "0"}})
        elif method == "tools/list":
            reply(message["id"], {"tools": [TOOL]})
        elif method == "tools/call":
            call(message["id"], message["params"].get("arguments") or {})
        elif method == "notifications/cancelled":
            sys.stderr.write(f"cancelled {message['params']['requestId']}\n")
            sys.stderr.flush()
    if MODE == "stubborn":
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
