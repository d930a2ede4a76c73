"""The official C++ client (PyPI ``rocketmq==0.4.4`` in ``.venv-interop``, installed by
``scripts/install-interop-clients.sh``) driven through ``tests/interop/cpp_broker_roundtrip.py``."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tests.support.paths import ROOT

INTEROP_PYTHON = ROOT / ".venv-interop" / "bin" / "python"
INTEROP = ROOT / "tests" / "interop"


def require_cpp_client() -> None:
    """Fail (not skip) without the client: the interop tests are part of the suite, and make test installs it."""
    if not INTEROP_PYTHON.exists():
        pytest.fail("C++ client venv missing: run scripts/install-interop-clients.sh (make test does)")


async def cpp_roundtrip(
    namesrv: str,
    topic: str,
    group: str,
    count: int,
    timeout: float,
    phases: str = "produce,consume",
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, object], str]:
    """Run the round trip (see its docstring): (exit code, its JSON result or {} on failure, stderr)."""
    require_cpp_client()
    proc = await asyncio.create_subprocess_exec(
        str(INTEROP_PYTHON),
        str(INTEROP / "cpp_broker_roundtrip.py"),
        namesrv,
        topic,
        group,
        str(count),
        str(timeout),
        phases,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=INTEROP,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout + 120)
    lines = out.decode().strip().splitlines()
    result = json.loads(lines[-1]) if lines and proc.returncode == 0 else {}
    return proc.returncode or 0, result, err.decode()
