"""``mqctl up --dledger N``: a member that exits while the group runs is told on up's output, once.

The group goes on without it (a Raft group survives a loss), so a member killed or stopped on a fatal
failure left nothing in the terminal ``up`` runs in. The watcher runs here on real child processes.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from mqctl.cli.up import watch_members


def _run_then_reap(
    work: Coroutine[Any, Any, None], procs: list[subprocess.Popen[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    """Run ``work`` with up's warnings captured, then kill and reap every child left."""
    try:
        with caplog.at_level(logging.WARNING, logger="mqctl.cli.up"):
            asyncio.run(work)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_member_that_exits_is_told_once_with_how(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # each member runs until its stdin closes, then exits with code 3
    member = [sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"]
    procs = [subprocess.Popen(member, stdin=subprocess.PIPE) for _ in range(3)]
    addrs = [f"127.0.0.1:{20000 + 4 * i}" for i in range(3)]
    confs = [tmp_path / f"store-broker-a-n{i}" / "broker.conf" for i in range(3)]

    def told() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    async def until_told(count: int) -> None:
        for _ in range(3000):
            if len(told()) >= count:
                return
            await asyncio.sleep(0.02)

    async def run() -> None:
        watch = asyncio.create_task(watch_members(procs, addrs, confs, interval=0.02))
        procs[0].send_signal(signal.SIGKILL)  # n0 is killed
        await until_told(1)
        procs[1].stdin.close()  # type: ignore[union-attr]  # n1 exits by itself, with code 3
        await until_told(2)
        for _ in range(5):  # more rounds of the watch: nothing is told twice
            await asyncio.sleep(0.02)
        watch.cancel()

    _run_then_reap(run(), procs, caplog)
    lines = told()
    assert len(lines) == 2, lines
    killed, exited = lines
    assert f"n0 127.0.0.1:20000 (pid {procs[0].pid}) exited (killed by SIGKILL)" in killed
    assert f"see {confs[0].parent / 'broker.log'}" in killed
    restarted_log = confs[0].parent / "logs" / "broker.log"  # where 'broker start --daemon' logs
    assert f"'mqctl broker start -c {confs[0]} --daemon' (it then logs in {restarted_log})" in killed
    assert "the group goes on with 2 of 3" in killed  # a majority is left
    assert "n1 127.0.0.1:20004" in exited and "exit code 3" in exited
    assert "1 of 3 left, no majority (2): the group elects no master" in exited
    assert not any("member n2" in line for line in lines)  # still running


def test_the_members_up_stops_are_not_told(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Ctrl-C stops the group: the watch ends first, so the members it terminates are not news."""
    from mqctl.cli.up import DLedgerGroup

    class Namesrv:
        stopped = False

        async def stop(self) -> None:
            self.stopped = True

    namesrv = Namesrv()
    confs = [tmp_path / f"store-broker-a-n{i}" / "broker.conf" for i in range(2)]
    group = DLedgerGroup(namesrv, confs, ["127.0.0.1:20000", "127.0.0.1:20004"], "127.0.0.1")  # type: ignore[arg-type]
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in confs]

    async def run() -> None:
        group.procs = list(procs)
        group._watch = asyncio.create_task(watch_members(procs, group.addrs, confs, interval=0.02))
        await asyncio.sleep(0.1)  # the watch has looked at running members
        await group.stop()
        await asyncio.sleep(0.1)

    _run_then_reap(run(), procs, caplog)
    assert [proc.returncode for proc in procs] == [-signal.SIGTERM] * 2
    assert namesrv.stopped and group.procs == [] and group._watch is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == []
