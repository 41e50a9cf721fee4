"""Small promises of the repository's files: what git ignores, what the docs index lists,
how the docs start a server, which examples honour LATTICE_PROVIDER."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_running_the_web_chat_leaves_nothing_untracked() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", ".agent-sessions/web_chat.db"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, "the web chat's default history file is not ignored"


def test_the_docs_index_names_each_example_once() -> None:
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    section = text.split("## Examples", 1)[1].split("\n## ", 1)[0]
    names = sorted(p.name for p in (ROOT / "examples").glob("*.py")
                   if not p.name.startswith("_")) + ["web_chat/"]
    for name in names:
        assert section.count(f"`{name}`") == 1, (name, section)


def test_the_docs_start_python_servers_with_sys_executable() -> None:
    # "python" may be another Python than the one running the docs' code (no venv active).
    for page in [*DOCS.glob("*.md"), ROOT / "README.md", *(ROOT / "examples").glob("*.py")]:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"MCPServerStdio\(\s*[\"']python3?[\"']", text), page.name


def test_the_notebook_honours_lattice_provider() -> None:
    # It picks its model through examples/_backend.py, so test_examples.py also runs it
    # with LATTICE_PROVIDER=openai.
    assert "from _backend import model_options" in (
        ROOT / "examples" / "notebook.py").read_text(encoding="utf-8")


def test_the_approvals_page_agrees_with_the_scaling_page() -> None:
    # The session lock keeps one user's requests apart: nobody has to serialise them.
    text = (DOCS / "approvals.md").read_text(encoding="utf-8")
    assert "serialise" not in text and "route a user to one" not in text
    assert "session_lock_wait_s" in text and "(scaling.md)" in text
