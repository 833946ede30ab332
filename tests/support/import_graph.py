"""The runtime import graph of one Python package, read from its source (nothing imported).

An edge `a -> b` means executing module `a` can import module `b` of the same package: any
`import` or `from ... import` statement, at module level or inside a function (a lazy
import still runs), except under `if TYPE_CHECKING:`. `from pkg import name` is an edge to
the submodule `pkg.name` when there is one, else to `pkg` itself (its `__init__`). The
implicit import of a parent package by its submodules is not an edge: a package's
`__init__` re-exporting its submodules is the usual layering, not a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def modules_of(package_dir: Path) -> dict[str, Path]:
    """Every module of the package rooted at `package_dir`, by dotted name."""
    root = package_dir.name
    found: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([root, *parts])] = path
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """`module -> modules of the same package it imports at run time`."""
    modules = modules_of(package_dir)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for imported in _runtime_imports(tree, name, is_package):
            if imported in modules:
                targets.add(imported)
            elif imported.rpartition(".")[0] in modules:
                targets.add(imported.rpartition(".")[0])
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _runtime_imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[str]:
    """Dotted names imported by `tree`, skipping `if TYPE_CHECKING:` blocks; for `from x
    import a, b` both `x.a` and `x.b` (submodule or not: the caller resolves)."""
    package = module if is_package else module.rpartition(".")[0]
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                yield f"{base}.{alias.name}" if alias.name != "*" else base
        else:
            pending.extend(ast.iter_child_nodes(node))


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
