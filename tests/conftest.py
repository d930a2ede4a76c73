"""Fixtures shared by the whole suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property tests check correctness, not speed (speed lives in benchmarks/): no per-example deadline, so a
# loaded machine cannot fail them. Loaded here, before any test module builds its own @settings on top.
settings.register_profile("mqctl", deadline=None)
settings.load_profile("mqctl")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


RunCli = Callable[..., CliResult]


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: own config dir, no inherited NameServer or colour settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQCTL_") and k not in ("NAMESRV_ADDR", "NO_COLOR")}
    env["MQCTL_CONFIG_DIR"] = str(tmp_path / "config")
    env["MQCTL_DATA_DIR"] = str(tmp_path / "data")
    env["COLUMNS"] = "200"
    return env


@pytest.fixture
def cli(cli_env: dict[str, str]) -> RunCli:
    """Run the real ``mqctl`` entry point in a subprocess."""

    def run(*args: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 60) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "mqctl", *args],
            capture_output=True,
            text=True,
            env={**cli_env, **(env or {})},
            input=input,
            timeout=timeout,
            cwd=ROOT,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run
