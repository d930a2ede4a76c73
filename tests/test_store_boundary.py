"""``mqctl`` reaches the store only through ``store.__all__``: the storage format (record layout, index
structs, walkers) stays in ``store`` and can change without touching the operations layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import store
from tests.support.sources import parse

pytestmark = pytest.mark.xdist_group("sources")

MQCTL = Path(__file__).resolve().parents[1] / "mqctl"


def store_imports(path: Path) -> list[tuple[int, str]]:
    """Each import of ``store`` in ``path`` that is not a name of ``store.__all__``: ``(line, what)``."""
    found = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("store.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("store."):
                found.append((node.lineno, f"from {node.module} import ..."))
            elif node.module == "store":
                found += [
                    (node.lineno, f"from store import {a.name}")
                    for a in node.names
                    if a.name not in store.__all__
                ]
    return found


def test_mqctl_imports_only_public_store_names() -> None:
    files = sorted(MQCTL.rglob("*.py"))
    assert len(files) > 50  # the scan sees the package
    leaks = [
        f"{path.relative_to(MQCTL.parent)}:{line}: {what}"
        for path in files
        for line, what in store_imports(path)
    ]
    assert leaks == [], "import these through store.__all__ (store/__init__.py):\n" + "\n".join(leaks)


def test_the_check_finds_a_leak(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text(
        "import store.record\n"
        "from store.indexfile import SLOT\n"
        "from store import engine, Message\n"
        "def f():\n"
        "    from store.errors import StoreError\n"
    )
    assert [what for _line, what in store_imports(leaky)] == [
        "import store.record",
        "from store.indexfile import ...",
        "from store import engine",
        "from store.errors import ...",
    ]


def test_every_public_name_exists() -> None:
    assert [name for name in store.__all__ if not hasattr(store, name)] == []
