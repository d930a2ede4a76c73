"""Fixtures that start OUR real broker (and NameServer) on 127.0.0.1 port 0 (helpers: tests/support/broker.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from tests.support.broker import BrokerHandle, ClusterHandle, start_broker, start_cluster, stop_cluster


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[BrokerHandle]:
    b = await start_broker(tmp_path / "store")
    client = RemotingClient()
    try:
        yield BrokerHandle(b.addr, client, b)
    finally:
        await client.close()
        await b.stop()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterHandle]:
    handle = await start_cluster(tmp_path)
    try:
        yield handle
    finally:
        await stop_cluster(handle)
