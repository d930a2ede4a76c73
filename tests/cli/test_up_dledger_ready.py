"""``mqctl up --dledger N``'s ready line names each member's /metrics and gRPC front, as the master/slave
``up``'s names its broker's: with ``--metrics-port 0`` (and gRPC on free ports) nothing else tells where they
are, and ``broker status`` of a member's store says the same."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.up import mqctl_up

MEMBER = re.compile(
    r"n(\d) (127\.0\.0\.1:\d+) \(pid \d+, metrics (\S+), gRPC \(5\.x clients\) (127\.0\.0\.1:\d+)\)"
)


@pytest.mark.slow
async def test_the_ready_line_names_each_members_metrics_and_grpc(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    args = ("--dledger", "3", "--broker-port", "0", "--metrics-port", "0", "--grpc-port", "0")
    async with mqctl_up(data, cli_env, free_port(), *args) as up:
        members = MEMBER.findall(up.ready)
        assert [m[0] for m in members] == ["0", "1", "2"], up.ready
        async with httpx.AsyncClient(timeout=30) as http:
            for _, _, url, _ in members:
                assert (await http.get(url)).status_code == 200, url
        assert len({m[3] for m in members}) == 3
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "mqctl",
                "broker",
                "status",
                "--store",
                str(data / "store-broker-a-n1"),
                "-o",
                "json",
            ],
            cwd=ROOT,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert (shown["address"], shown["metrics"], shown["grpc"]) == members[1][1:], shown
    assert up.code == 0
