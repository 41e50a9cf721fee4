"""Every ```python block of every page in docs/ runs, in order, so the docs cannot rot.

The blocks of one page share one module namespace (a page builds on its earlier blocks);
each page runs in a fresh temporary directory, with no API key in the environment, so a
snippet that tried to reach the real API would fail instead of spending money.
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
import types
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BUILDS_ON = "The code blocks on this page build on each other"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> List[Tuple[int, str]]:
    """``(first line number, source)`` of every ```python block, in order."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in FENCE.finditer(text)]


def pages() -> List[Path]:
    return sorted(DOCS.glob("*.md"))


@pytest.fixture
def page_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[types.ModuleType]:
    """A real module to run a page in, as a script runs: named ``__main__`` (so a block's
    ``if __name__ == "__main__":`` part runs, as it would when the reader runs the file),
    and in sys.modules under that name (dataclasses and typing.get_type_hints look
    classes' modules up there) and a name of its own."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    name = f"docs_page_{request.node.callspec.id.replace('-', '_').replace('.', '_')}"
    module = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(sys.modules, "__main__", module)
    yield module


def test_there_are_pages_with_code() -> None:
    names = {p.name for p in pages()}
    for expected in ("index.md", "agent-loop.md", "tools.md", "structured-output.md",
                     "timeouts-and-cancellation.md", "history-stores.md", "compaction.md",
                     "model-clients.md", "testing.md"):
        assert expected in names
        if expected != "index.md":
            assert python_blocks((DOCS / expected).read_text(encoding="utf-8")), expected


def test_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in pages():
        if page.name != "index.md":
            assert f"({page.name})" in index, f"index.md does not link {page.name}"


# Optional parts a page may show (job engines, MCP): the test extra installs them (on
# Python 3.10+), and CI installs the test extra. Without one, its page skips saying how to
# install it, instead of failing.
OPTIONAL = {"celery": "celery[redis]", "rq": "rq", "dbos": "dbos", "redis": "redis",
            "mcp": "mcp"}


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.stem)
def test_page_runs(page: Path, page_module: types.ModuleType) -> None:
    text = page.read_text(encoding="utf-8")
    for line, source in python_blocks(text):
        # Padding with newlines makes tracebacks point at the line in the .md file.
        code = compile("\n" * (line - 1) + source, str(page), "exec")
        try:
            exec(code, page_module.__dict__)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top not in OPTIONAL:
                raise
            pytest.skip(f"{page.name} needs {top}, not installed: pip install "
                        f"'{OPTIONAL[top]}' (or the test extra: pip install -e '.[test]', "
                        "Python 3.10+)")


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.stem)
def test_page_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", text):
        assert (DOCS / target).exists(), f"{page.name} links to missing {target}"


def free_names(source: str) -> Set[str]:
    """Names ``source`` reads but never binds itself (nor are builtins): what it needs
    from earlier blocks. Any binding anywhere in the block counts, which is generous."""
    bound, used = set(dir(builtins)), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return used - bound


def test_free_names() -> None:
    assert free_names("import os\nx = os.sep + y\nprint(x)") == {"y"}
    assert free_names("def f(a):\n    return a + b\n[c for c in f(1)]") == {"b"}


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.stem)
def test_a_page_whose_blocks_build_on_each_other_says_so(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    needs = {line: sorted(free_names(source)) for line, source in python_blocks(text)}
    needs = {line: names for line, names in needs.items() if names}
    if needs:
        assert BUILDS_ON in text.split("```", 1)[0], (
            f"{page.name}: blocks use names from earlier blocks ({needs}); say so before "
            f"the first block with {BUILDS_ON!r}")


OPENING = re.compile(r"^```", re.MULTILINE)


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.stem)
def test_every_fence_says_its_language(page: Path) -> None:
    """An unlabelled fence is never run: a Python block in one would rot unseen."""
    text = page.read_text(encoding="utf-8")
    fences = [m.start() for m in OPENING.finditer(text)]
    unlabelled = [text.count("\n", 0, start) + 1 for start in fences[::2]
                  if text[start:text.index("\n", start)].strip() == "```"]
    assert unlabelled == [], f"{page.name}: fences without a language at lines {unlabelled}"


def test_background_runs_page_imported_by_a_worker_runs_no_job(tmp_path: Path) -> None:
    """A worker imports the page's code as its jobs module (not ``__main__``), in a process
    of its own: defining the jobs must not run one, nor touch the store."""
    import os
    import subprocess

    if sys.version_info < (3, 10):
        pytest.skip("the page's job engines are test extras only on Python 3.10+")
    work = tmp_path / "worker"
    work.mkdir()
    blocks = python_blocks((DOCS / "background-runs.md").read_text(encoding="utf-8"))
    (work / "jobs.py").write_text("\n\n".join(source for _, source in blocks))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CHAT_DB", "CELERY_", "REDIS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(DOCS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", "import jobs; print(callable(jobs.run_job))"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "True\n", done.stdout  # and nothing else printed: no job ran
    assert sorted(p.name for p in work.iterdir() if p.name != "__pycache__") == ["jobs.py"], \
        "importing the jobs module ran a job"
