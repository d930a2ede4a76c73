"""A disk filled by another process: sends are refused with a RocketMQ code, the broker lives on.

The store sits on a small tmpfs that a filler file fills up; the broker runs in a subprocess so that a
SIGBUS (a store into a sparse mapping on a full disk) shows as a dead process, not a dead test run.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.record import decode_records
from tests.support.broker import BrokerClient
from tests.support.namesrv import namesrv_config
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_until


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (skips when this machine does not let us mount one)."""
    where.mkdir()
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        pytest.skip("no mount command: cannot make a small file system to fill")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> int:
    """Write ``path`` until the file system has no block left; returns the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 1):
            block = b"\xff" * chunk
            while True:
                try:
                    written += f.write(block) or 0
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return written


@pytest.mark.slow
async def test_sends_on_a_disk_filled_from_outside_are_refused_and_resume(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with small_tmpfs(tmp_path / "mnt", "24m") as mnt:
        namesrv = NamesrvController(namesrv_config(tmp_path))
        await namesrv.start()
        port = free_port()
        conf = tmp_path / "broker.conf"
        conf.write_text(
            f"brokerName=broker-f\nbrokerIP1=127.0.0.1\nlistenPort={port}\n"
            f"namesrvAddr=127.0.0.1:{namesrv.port}\nstorePathRootDir={mnt / 'store'}\n"
            "mappedFileSizeCommitLog=4194304\nmaxHashSlotNum=1000\nmaxIndexNum=4000\nmetricsEnable=false\n"
            # the watermarks would refuse sends on their own (every 10 s): here the file system must
            "diskSpaceWarningLevelRatio=100\ncleanFileForciblyEnable=false\n"
        )
        log_path = tmp_path / "broker.log"
        client = RemotingClient()
        addr = f"127.0.0.1:{port}"
        broker = BrokerClient(addr, client)

        async def broker_up() -> bool:
            try:
                r = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0
                )
            except Exception:
                return False
            return r.code == ResponseCode.SUCCESS

        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)],
                cwd=ROOT,
                env=cli_env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        try:
            await wait_until(broker_up)
            bodies = [f"before-{i}".encode() * 100 for i in range(5)]
            for body in bodies:
                r = await broker.send("Full", body, keys="k")
                assert r.code == ResponseCode.SUCCESS, r.remark
            assert fill(mnt / "filler") > 0

            # Keep sending: units, index entries and the CommitLog run out of reserved blocks; the
            # first put that needs a block the disk does not have is refused, the broker lives on.
            refused = None
            for i in range(3000):
                r = await broker.send("Full", f"after-{i}".encode() * 400, keys=f"k{i}")
                if r.code != ResponseCode.SUCCESS:
                    refused = r
                    break
                bodies.append(f"after-{i}".encode() * 400)
            assert refused is not None, "3,000 sends of 4 KB fit on a full 24 MB file system"
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, (refused.code, refused.remark)
            assert "disk is full" in (refused.remark or "")
            # the same message again still needs the block the disk does not have (a smaller one may fit
            # in blocks reserved before the disk filled, and is then stored)
            again = await broker.send("Full", f"after-{i}".encode() * 400, keys=f"k{i}")
            assert again.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert proc.poll() is None, "the broker died on a full disk"

            pulled = await broker.pull("G", "Full", 0, 0, max_nums=5)  # reads are served meanwhile
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            assert [m.body for m in decode_records(pulled.body)] == bodies[:5]
            last = len(bodies) - 1
            pulled = await broker.pull("G", "Full", 0, last, max_nums=1)
            assert [m.body for m in decode_records(pulled.body)] == [bodies[last]]

            os.unlink(mnt / "filler")  # space returns: sends succeed again, nothing else needed
            r = await broker.send("Full", b"space is back")
            assert r.code == ResponseCode.SUCCESS, r.remark
            pulled = await broker.pull("G", "Full", 0, int(r.ext_fields["queueOffset"]), max_nums=1)
            assert [m.body for m in decode_records(pulled.body)] == [b"space is back"]
            assert proc.poll() is None
        finally:
            proc.send_signal(signal.SIGTERM)
            try:  # in a thread: the NameServer on this loop answers the broker's unregistration meanwhile
                await asyncio.to_thread(proc.wait, 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            await client.close()
            await namesrv.stop()
        log_text = log_path.read_text(errors="replace")
        assert log_text.count("store full: puts refused") == 1, log_text[-3000:]
        assert "store writable again" in log_text
        assert "Traceback" not in log_text, log_text[-3000:]
