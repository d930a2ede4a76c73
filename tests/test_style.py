"""The style ``make lint`` enforces, checked by ``make test`` too (CI runs only that): ``ruff check`` and
``ruff format --check`` over the product, tests and benchmarks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

RUFF = Path(sys.executable).parent / "ruff"
TREES = ["mqctl", "daemon", "store", "tests", "benchmarks"]


@pytest.mark.parametrize("argv", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(argv: list[str]) -> None:
    if not RUFF.exists():
        pytest.fail(f"{RUFF} is missing: the dev extra installs it (make test bootstraps it)")
    done = subprocess.run([str(RUFF), *argv, *TREES], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
