"""The import graph of our three packages, built from their sources: no cycles, arrows only point down.

Counted: every import at module level, including those under ``if TYPE_CHECKING:`` (a cycle hidden
from the interpreter is still a circle of modules that know each other) and inside top-level
``try``/``if`` blocks. Not counted: imports inside functions, which are deliberate late bindings
(lazy heavy imports, the broker registering its processors).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sources import parse

pytestmark = pytest.mark.xdist_group("sources")

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("store", "daemon", "mqctl")
#: Which of our packages each package may import (the layering of GUIDE.md).
ALLOWED = {"store": {"store"}, "daemon": {"store", "daemon"}, "mqctl": {"store", "daemon", "mqctl"}}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements of a module body, descending into blocks but not into functions or classes."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, block, []):
                    if isinstance(child, ast.ExceptHandler):
                        yield from _module_level(child.body)
                    else:
                        yield from _module_level([child])


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in known}
    base = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    out = set()
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        if sub in known:
            out.add(sub)  # `from package import module`
        elif base in known:
            out.add(base)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = parse(path)
        edges: set[str] = set()
        for node in _module_level(tree.body):
            edges |= _targets(name, path, node, known)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return found


def test_the_graph_sees_known_edges() -> None:
    """The walker finds plain, package-relative and TYPE_CHECKING-guarded imports (else the tests below pass
    vacuously)."""
    graph = import_graph()
    assert "daemon.broker.processors.send" in graph
    assert "store.api" in graph["daemon.broker.broker"]
    assert "daemon.broker.context" in graph["daemon.broker.processors.send"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_level_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_imports_only_point_down() -> None:
    wrong = sorted(
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        for target in targets
        if target.split(".")[0] not in ALLOWED[name.split(".")[0]]
    )
    assert wrong == []


def test_topic_attributes_do_not_import_the_pop_engine() -> None:
    """Every topic command imported the POP engine, for one response code: attributes took
    INVALID_PARAMETER from it rather than from the remoting codes, its home."""
    graph = import_graph()
    reached: set[str] = set()
    todo = ["daemon.broker.attributes"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph[module])
    assert "daemon.broker.pop" not in reached, sorted(reached)
