"""``mqctl up --dledger N``: its ready line names each member's /metrics and gRPC front, as the master/slave
``up``'s names its broker's: with ``--metrics-port 0`` (and gRPC on free ports) nothing else tells where they
are, and ``broker status`` of a member's store says the same."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until

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
        status = await _mqctl(
            cli_env, "broker", "status", "--store", str(data / "store-broker-a-n1"), "-o", "json"
        )
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert (shown["address"], shown["metrics"], shown["grpc"]) == members[1][1:], shown
    assert up.code == 0


async def _mqctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``mqctl ARGS`` in a process of its own, off the test's loop."""
    argv = [sys.executable, "-m", "mqctl", *args]
    return await asyncio.to_thread(
        subprocess.run, argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
async def test_ctrl_c_stops_a_member_restarted_with_broker_start_daemon(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A member that exits is told with 'start it again with mqctl broker start -c CONF --daemon'; one
    restarted so is no child of up, and up's Ctrl-C ('stops all') left it running, holding the group's
    ports and store. up now stops whatever broker runs on its members' stores. Both of up's warnings name
    the log the restarted member writes, the one 'broker start --daemon' reports (not up's child's)."""
    data = tmp_path / "data"
    conf = data / "store-broker-a-n2" / "broker.conf"
    pidfile = conf.parent / "broker.pid"
    async with mqctl_up(
        data, cli_env, free_port(), "--dledger", "3", "--broker-port", "0", "--no-metrics"
    ) as up:
        first = int(pidfile.read_text().split()[0])
        os.kill(first, signal.SIGKILL)
        # reaped: up's watch polled it, and logs its exit in that same pass (a zombie not yet: the
        # restart and the Ctrl-C could come before up's next pass, and its warning never be written)
        await wait_until(lambda: not _alive(first), 60)
        started = await _mqctl(cli_env, "broker", "start", "-c", str(conf), "--daemon")
        assert started.returncode == 0, started.stderr
        again = int(pidfile.read_text().split()[0])
        assert again != first and _alive(again)
    assert up.code == 0
    (log,) = re.findall(r", log (\S+)$", started.stdout + started.stderr, re.MULTILINE)
    assert Path(log).stat().st_size > 0  # the restarted member wrote there
    (exited,) = [line for line in up.after.splitlines() if "DLedger member n2" in line]
    assert f"'mqctl broker start -c {conf} --daemon' (it then logs in {log})" in exited, exited
    (stopped,) = [line for line in up.after.splitlines() if "restarted outside up" in line]
    assert f"its log {log})" in stopped, stopped
    try:
        await wait_until(lambda: not _alive(again), 30)
    finally:
        if _alive(again):
            os.kill(again, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    """up's killed child stays a zombie until up reaps it: dead all the same."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


@pytest.mark.slow
async def test_an_acl_dledger_group_copies_the_masters_metadata_signed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """``--acl --dledger 3`` was refused: a member signs nothing, so the ACL master refused the copy of its
    topics and groups each member takes. Members sign it with the admin account now (their broker.conf,
    which holds its secret, owner-only), and a topic created on the master reaches the others."""
    import stat

    data = tmp_path / "data"
    args = ("--dledger", "3", "--broker-port", "0", "--no-metrics", "--acl")
    async with mqctl_up(data, cli_env, free_port(), *args) as up:
        assert "ACL on: access key mqctl-admin" in up.ready
        stores = [data / f"store-broker-a-n{i}" for i in range(3)]
        assert {stat.S_IMODE((s / "broker.conf").stat().st_mode) for s in stores} == {0o600}
        up.env.update(
            MQCTL_ACCESS_KEY="mqctl-admin", MQCTL_SECRET_KEY_FILE=str(data / "acl" / "admin.secret")
        )
        await asyncio.to_thread(up.mq, "topic", "create", "-t", "AclMemberT")

        def holding() -> int:
            files = [s / "config" / "topics.json" for s in stores]
            return sum(f.exists() and "AclMemberT" in f.read_text() for f in files)

        await wait_until(lambda: holding() >= 2, timeout=90)  # the followers (members copy every 10 s)
    assert up.code == 0
    logs = "".join((s / "broker.log").read_text() for s in stores if (s / "broker.log").exists())
    assert "slave metadata sync" not in logs, logs
