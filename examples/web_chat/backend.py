"""The web chat's model and tool: the real API when ANTHROPIC_API_KEY is set, else a scripted
model behind the bundled mock Messages API server (so the example runs offline).

Shared by the web process and the job workers (jobs.py): each process starts its own mock
server on first use, so importing this module starts nothing.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any, Dict, List, Optional

import lattice
from lattice.testing import MockMessagesServer

OUTBOX: List[Dict[str, str]] = []  # where the demo's "emails" go (in the job's process)


@lattice.tool(requires_approval=True)
def send_email(to: str, subject: str) -> str:
    """Send an email (a person must approve every one)."""
    OUTBOX.append({"to": to, "subject": subject})
    return f"Email to {to} with subject {subject!r} queued as message #{len(OUTBOX)}."


def scripted_model(body: Dict[str, Any]) -> Dict[str, Any]:
    """Asks to send_email when the user mentions an address; answers a tool result with a
    sentence quoting it; otherwise echoes. WEB_CHAT_MODEL_DELAY_S makes it slow (tests)."""
    time.sleep(float(os.environ.get("WEB_CHAT_MODEL_DELAY_S", "0")))
    last = body["messages"][-1]["content"]
    blocks = [{"type": "text", "text": last}] if isinstance(last, str) else last
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        content = results[0].get("content")
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content)
        verdict = "I could not send it" if results[0].get("is_error") else "Done"
        return {"content": f"{verdict}: {content}"}
    text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    address = re.search(r"[\w.+-]+@[\w-]+(\.[\w-]+)+", text)
    if address is None:
        return {"content": f"You said: {text}. Mention an email address and I will write."}
    to = address.group(0)
    return {"content": [
        {"type": "text", "text": f"Sure, I will email {to} for you."},
        {"type": "tool_use", "name": "send_email", "input": {"to": to, "subject": "Hello"}}]}


class Backend:
    """Agent options for the model in use; the mock server starts on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._options: Optional[Dict[str, Any]] = None
        self.mock: Optional[MockMessagesServer] = None

    def options(self) -> Dict[str, Any]:
        with self._lock:
            if self._options is None:
                self._options = self._start()
            return self._options

    def _start(self) -> Dict[str, Any]:
        if os.environ.get("ANTHROPIC_API_KEY"):
            options = {"model": os.environ.get("LATTICE_MODEL", "claude-sonnet-4-5")}
            if os.environ.get("ANTHROPIC_BASE_URL"):
                options["base_url"] = os.environ["ANTHROPIC_BASE_URL"]
            return options
        self.mock = MockMessagesServer([scripted_model], record=False, repeat=True).start()
        return {"model": "mock-model", "base_url": self.mock.base_url,
                "api_key": "offline-mock-key"}

    def close(self) -> None:
        if self.mock is not None:
            self.mock.close()
