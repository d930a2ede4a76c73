"""Driving the ali-ons (npm) interop client script: the bodies it sends and one run of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.bounded import run_bounded
from tests.support.paths import ROOT

INTEROP = ROOT / "tests" / "interop"
SCRIPT = INTEROP / "ons_broker_roundtrip.js"


def expected_body(i: int, count: int) -> bytes:
    """The body the script sends as message ``i`` of ``count`` (10 bytes up to 6 KiB)."""
    length = 10 + (i * (6144 - 10)) // max(1, count - 1)
    return bytes((i * 31 + j) % 251 for j in range(length))


async def node(
    *args: str,
    deadline: float = 60,
    preload: str | None = None,
    env: dict[str, str] | None = None,
    script: Path = SCRIPT,
    package: str = "ali-ons",
) -> dict[str, object]:
    """Run the script (ali-ons' by default; `script` of the npm `package`) with ``args`` (after the module
    ``preload`` with ``env`` added, when given); it must exit 0 within ``deadline`` seconds (past it, the
    script prints what it is waiting for and stops; see `run_bounded`). Returns the JSON summary on its
    last stdout line."""
    exe = shutil.which("node")
    if exe is None or shutil.which("npm") is None:
        pytest.skip(f"node/npm not installed: the {package} interop test needs them")
    if not (INTEROP / "node_modules" / package).is_dir():
        pytest.fail(f"{package} not installed: run scripts/install-interop-clients.sh (make test does)")
    argv = [exe, *(("-r", preload) if preload else ()), str(script), *args]
    done = await run_bounded(argv, deadline=deadline, what=f"{script.name} {args[0]}", cwd=INTEROP, env=env)
    assert done.returncode == 0, f"{package} script failed ({done.returncode}): {done.stderr_tail()}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
