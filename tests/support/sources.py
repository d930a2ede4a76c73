"""The product's sources parsed once per process for the tests that scan them (one home, the import graph,
the store boundary): those tests share one pytest-xdist worker (``xdist_group("sources")``), which parses
the tree once instead of once per test."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


@cache
def parse(path: Path) -> ast.Module:
    """The module at ``path`` parsed (shared: callers must not change the tree)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))
