"""The layout's rules, checked on the source: no import cycle (function-level imports included),
no module over 400 lines, nothing private imported from another module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kernels", "pipeline", "flows")
MAX_LINES = 400


def modules() -> dict[str, Path]:
    """Dotted name under tokensweep (`pipeline.store.chunks`) -> file, for the three packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]):
    """(imported module, imported names) for every import of the project's own modules."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("tokensweep."):
                target = node.module[len("tokensweep."):]
            else:
                continue
            if not target:  # the package root: `from .. import _version` (setuptools-scm's file)
                continue
            names = [alias.name for alias in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            yield target, [n for n in names if f"{target}.{n}" not in known]
            for sub in submodules:
                yield sub, []
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tokensweep."):
                    yield alias.name[len("tokensweep."):], []


def owner(target: str, known: dict[str, Path]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {m: set() for m in known}
    for name, path in known.items():
        for target, _ in imports(name, path, known):
            found = owner(target, known)
            if found and found != name:
                edges[name].add(found)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_deferred_imports_included():
    assert cycles(graph()) == []


def test_the_cycle_finder_sees_a_deferred_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_over_400_lines():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_nothing_private_is_imported_across_modules():
    known = modules()
    crossing = [f"{name} imports {target}.{n}" for name, path in known.items()
                for target, names in imports(name, path, known)
                for n in names if n.startswith("_") and not n.startswith("__")]
    assert crossing == []

