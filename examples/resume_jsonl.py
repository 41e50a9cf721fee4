"""Resume a conversation in another process from a JSONL history file.

    python examples/resume_jsonl.py [path.jsonl]

A first process tells the model a name and exits. A second process builds a new Agent on
the same file and asks for the name: the Agent loads the stored history before its first
query and sends it along, which the replies show.

Offline by default: a model that answers from the messages it is sent. With
ANTHROPIC_API_KEY set it talks to the real API (model from LATTICE_MODEL, default
claude-sonnet-4-5).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

import lattice
from lattice.testing import FunctionModelClient

MODEL = os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")


def remembering_model(request: lattice.ModelRequest) -> str:
    """The offline model: knows only what the request's messages tell it."""
    text = " ".join(m["content"] for m in request.messages if isinstance(m["content"], str))
    names = re.findall(r"My name is (\w+)", text)
    if "What is my name" in request.messages[-1]["content"]:
        return f"Your name is {names[-1]}." if names else "You have not told me your name."
    return "Nice to meet you!"


def run_turn(path: str, prompt: str) -> Dict[str, Any]:
    """One conversation turn in THIS process, on the history stored at ``path``."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        real = lattice.AnthropicClient()
        client = FunctionModelClient(real.create)  # records what was sent
    else:
        client = FunctionModelClient(remembering_model)
    agent = lattice.Agent(model=MODEL, model_client=client,
                          history_store=lattice.create_jsonl_history_store(path))
    result = agent.prompt(prompt)
    return {
        "pid": os.getpid(),
        "prompt": prompt,
        "reply": result.result,
        "messages_sent_to_model": [m["role"] for m in client.requests[-1].messages],
    }


def run_turn_in_child(path: str, prompt: str) -> Dict[str, Any]:
    """``run_turn`` in a fresh Python process (this file, run with ``--turn``)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(lattice.__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--turn", path, prompt],
                          env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"the child process failed:\n{done.stderr}")
    result: Dict[str, Any] = json.loads(done.stdout)
    return result


def demo(path: str) -> List[Dict[str, Any]]:
    """Two turns of one conversation, each in its own process."""
    return [run_turn_in_child(path, "My name is Ada."),
            run_turn_in_child(path, "What is my name?")]


def main(argv: Optional[List[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--turn"]:
        print(json.dumps(run_turn(args[1], args[2]), ensure_ascii=False))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = args[0] if args else os.path.join(tmp, "sessions", "ada.jsonl")
        for turn in demo(path):
            print(f"process {turn['pid']}: {turn['prompt']!r} -> {turn['reply']!r}")
            print(f"    the model was sent: {', '.join(turn['messages_sent_to_model'])}")
        print(f"stored in {path}:")
        for message in lattice.create_jsonl_history_store(path).load():
            print("   ", json.dumps(message, ensure_ascii=False))


if __name__ == "__main__":
    main()
