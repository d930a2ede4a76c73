"""``make bench`` runs every ``benchmarks/bench_*.py`` with no arguments and compares runs by their last
line, so each goal benchmark must end with :func:`benchlib.summary` (tools that need arguments live in
``benchmarks/tools/``). Checked on the sources: running them is ``make bench``'s job, not the suite's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import ROOT

GOALS = sorted((ROOT / "benchmarks").glob("bench_*.py"))


def test_there_are_goal_benchmarks() -> None:
    assert len(GOALS) >= 10


@pytest.mark.parametrize("path", GOALS, ids=lambda p: p.stem)
def test_each_goal_benchmark_ends_with_one_comparable_line(path: Path) -> None:
    tree = ast.parse(path.read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "summary"
    ]
    assert calls, f"{path.name} never calls benchlib.summary"
    assert all(isinstance(c.args[0], ast.Name) and c.args[0].id == "__file__" for c in calls)
