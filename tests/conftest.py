import os
import threading
from pathlib import Path

import pytest

# ../shared beside the repository; LATTICE_SHARED overrides it (e.g. from a git worktree).
SHARED = Path(os.environ.get("LATTICE_SHARED") or Path(__file__).resolve().parents[2] / "shared")


def tool_use(name, input=None, id=None):
    return {"type": "tool_use", "id": id or f"toolu_{name}", "name": name, "input": input or {}}


def reply(*blocks, stop_reason=None, usage=None, **extra):
    """An assistant reply dict; strings are text blocks."""
    content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
    out = {"role": "assistant", "content": content}
    if stop_reason:
        out["stop_reason"] = stop_reason
    if usage:
        out["usage"] = usage
    out.update(extra)
    return out


@pytest.fixture
def no_thread_leak():
    """Asserts the test leaves no lattice threads running (with well-behaved clients)."""
    yield
    import time

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [t for t in threading.enumerate()
                 if t.name.startswith(("lattice-query", "lattice-tool"))]
        if not alive:
            return
        time.sleep(0.01)
    raise AssertionError(f"threads still running: {alive}")


# A private PostgreSQL cluster for the store tests (see pg_fixture.py).
from pg_fixture import postgres_server  # noqa: E402, F401
