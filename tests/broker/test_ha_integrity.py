"""Replication integrity with real daemons on 127.0.0.1: a slave appends and acknowledges only whole,
checked records; a master streams only to registered slaves; a diverged slave sets its tail aside."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from store.config import SLAVE
from store.engine import DefaultMessageStore
from store.ha import REPORT, encode_frame
from store.message import Message
from tests.broker.test_ha import SMALL
from tests.support.broker import start_broker
from tests.support.stores import small_config
from tests.support.waiting import wait_until


@dataclass
class FakeMaster:
    """An HA master that sends ``first`` to the slave's first session and every report it gets back."""

    first: bytes
    reports: list[list[int]] = field(default_factory=list)
    closed_by_slave: list[bool] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mine: list[int] = []
        self.reports.append(mine)
        try:
            mine.append(REPORT.unpack(await reader.readexactly(8))[0])
            if len(self.reports) == 1:
                writer.write(self.first)
                await writer.drain()
            while True:
                mine.append(REPORT.unpack(await reader.readexactly(8))[0])
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_slave.append(True)
        finally:
            writer.close()


@pytest.fixture
async def fake_master() -> AsyncIterator[tuple[FakeMaster, str]]:
    fake = FakeMaster(b"")
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    try:
        yield fake, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


def source_records(root: Path, n: int) -> bytes:
    """The CommitLog bytes of ``n`` records, as a real master would send them from offset 0."""
    config = small_config(root, mapped_file_size_commit_log=SMALL["mapped_file_size_commit_log"])
    with DefaultMessageStore(config) as store:
        for i in range(n):
            assert store.put_message(Message("Src", f"record-{i}".encode() * 30, queue_id=0)).ok
        return bytes(store.commit_log.files.files[0].view[: store.max_phy_offset])


async def slave_of(root: Path, master: str) -> Broker:
    return await start_broker(root, broker_role=SLAVE, broker_id=1, ha_master_address=master, **SMALL)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["garbage", "moved records"])
async def test_a_fake_masters_bad_bytes_are_neither_appended_nor_acknowledged(
    tmp_path: Path, fake_master: tuple[FakeMaster, str], attack: str
) -> None:
    """4,096 random bytes in a well-placed frame; sound records sent at an offset they do not name."""
    fake, addr = fake_master
    raw = source_records(tmp_path / "src", 5)
    file_size = SMALL["mapped_file_size_commit_log"]
    fake.first = encode_frame(0, os.urandom(4096)) if attack == "garbage" else encode_frame(file_size, raw)
    slave = await slave_of(tmp_path / "slave", addr)
    try:
        await wait_until(lambda: len(fake.reports) >= 2)  # the slave closed the first session
        assert fake.closed_by_slave
        assert fake.reports[0] and set(fake.reports[0]) == {0}  # nothing acknowledged
        assert slave.store.max_phy_offset == 0  # nothing appended
        assert fake.reports[1][0] == 0
    finally:
        await slave.stop()
