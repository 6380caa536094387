"""The package's modules import each other without circles.

Every import counts: at module level, inside functions (lazy) and under ``TYPE_CHECKING``. A
circle held apart only by a lazy import is still a circle: the two modules cannot be understood
or changed apart. The graph is read from the source (no module is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_files(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` (a folder under ROOT)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(resolve(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            found.update(resolve(f"{base}.{alias.name}") for alias in node.names)
    found.discard(None)
    found.discard(name)
    return {m for m in found if m is not None}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def graph_of(package: str) -> dict[str, set[str]]:
    files = module_files(package)
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def test_the_circle_finder_finds_a_lazy_circle_and_one_under_type_checking(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    (pkg / "c.py").write_text("from . import a\n")
    files = {"pkg": pkg / "__init__.py", **{f"pkg.{m}": pkg / f"{m}.py" for m in "abc"}}
    graph = {n: imported_modules(n, p, set(files)) for n, p in files.items()}
    assert graph["pkg.c"] == {"pkg.a"}
    assert import_circles(graph) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("package", ["marlgrid", "experiments"])
def test_no_import_circles(package):
    circles = import_circles(graph_of(package))
    assert not circles, (
        f"import circles in {package}/ (lazy and TYPE_CHECKING imports count): "
        + "; ".join(" <-> ".join(c) for c in circles)
    )
