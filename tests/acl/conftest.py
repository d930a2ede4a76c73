"""A broker (and NameServer) with aclEnable=true over a plain_acl.yml in a tmp ROCKETMQ_HOME."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.broker.conftest import broker, cluster
from tests.namesrv.conftest import namesrv
from tests.support.acl import write_acl
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster

__all__ = ["broker", "cluster", "namesrv"]  # re-exported fixtures: daemons without ACL


@pytest.fixture
def acl_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    write_acl(home)
    return home


@pytest.fixture
async def acl_cluster(tmp_path: Path, acl_home: Path) -> AsyncIterator[ClusterHandle]:
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(acl_home))
    try:
        yield handle
    finally:
        await stop_cluster(handle)
