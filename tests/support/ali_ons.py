"""Driving the ali-ons (npm) interop client script: the bodies it sends and one run of it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.paths import ROOT

INTEROP = ROOT / "tests" / "interop"
SCRIPT = INTEROP / "ons_broker_roundtrip.js"


def expected_body(i: int, count: int) -> bytes:
    """The body the script sends as message ``i`` of ``count`` (10 bytes up to 6 KiB)."""
    length = 10 + (i * (6144 - 10)) // max(1, count - 1)
    return bytes((i * 31 + j) % 251 for j in range(length))


async def node(
    *args: str,
    timeout: float = 240,
    preload: str | None = None,
    env: dict[str, str] | None = None,
    script: Path = SCRIPT,
    package: str = "ali-ons",
) -> dict[str, object]:
    """Run the script (ali-ons' by default; `script` of the npm `package`) with ``args`` (after the module
    ``preload`` with ``env`` added, when given); it must exit 0. Returns the JSON summary on its last
    stdout line."""
    exe = shutil.which("node")
    if exe is None or shutil.which("npm") is None:
        pytest.skip(f"node/npm not installed: the {package} interop test needs them")
    if not (INTEROP / "node_modules" / package).is_dir():
        pytest.fail(f"{package} not installed: run scripts/install-interop-clients.sh (make test does)")
    proc = await asyncio.create_subprocess_exec(
        exe,
        *(("-r", preload) if preload else ()),
        str(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=INTEROP,
        env={**os.environ, **env} if env else None,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, f"{package} script failed ({proc.returncode}): {err.decode()[-3000:]}"
    return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]
