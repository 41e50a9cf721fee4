"""The core's import graph has no circle (issue 33): every import counts, those under
``TYPE_CHECKING`` and those inside functions included, so each module stands on a floor
below it and can be read without the ones above."""

import ast
from pathlib import Path

LATTICE = Path(__file__).resolve().parents[2] / "lattice"


def module_name(path):
    parts = ["lattice", *path.relative_to(LATTICE).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules():
    return {module_name(p): p for p in LATTICE.rglob("*.py")}


def imports(name, path, known):
    """The lattice modules ``name`` imports (a package's own ``__init__`` and ancestors are
    left out: importing a submodule runs them, but they are not what the module uses)."""
    is_package = path.name == "__init__.py"
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            if target in known and not name.startswith(target + ".") and target != name:
                found.add(target)
    return found


def graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def find_circle(edges):
    """One circle as a list of modules, or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# Circles inside one helper family of another folder, not through the core: the mock
# server and its handlers (lattice/testing), PostgreSQL's store and its lock.
OUTSIDE = ("lattice.testing.mock_server", "lattice.testing._mock", "lattice.stores.pg_lock")


def test_the_core_has_no_import_circle():
    edges = graph()
    # The top-level package re-exports everything (that is its job); nothing imports it.
    edges = {k: {t for t in v if t != "lattice" and not t.startswith(OUTSIDE)}
             for k, v in edges.items() if k != "lattice"}
    circle = find_circle(edges)
    assert circle is None, " -> ".join(circle)


def test_the_checker_finds_a_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_the_ground_floor_imports_nothing_above_it():
    edges = graph()
    ground = {"lattice.errors", "lattice.usage", "lattice.options", "lattice._version"}
    for name in ground:
        assert edges[name] <= ground, (name, edges[name] - ground)
