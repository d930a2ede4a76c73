"""A broker (and NameServer) with aclEnable=true over a plain_acl.yml in a tmp ROCKETMQ_HOME."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.acl.signature import Signer
from daemon.remoting.client import RemotingClient
from tests.broker.conftest import BrokerClient, ClusterHandle, broker, cluster, start_cluster, stop_cluster
from tests.namesrv.conftest import namesrv

__all__ = ["broker", "cluster", "namesrv"]  # re-exported fixtures: daemons without ACL

ADMIN_AK, ADMIN_SK = "RocketMQAdmin", "admin-secret-1"
USER_AK, USER_SK = "rocketmq2", "12345678"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: {USER_AK}
    secretKey: "{USER_SK}"
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB|SUB
      - TopicDeny=DENY
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
"""


def write_acl(home: Path, text: str = PLAIN_ACL) -> Path:
    path = home / "conf" / "plain_acl.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


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


async def as_account(handle: ClusterHandle, ak: str | None, sk: str = "") -> BrokerClient:
    """A client of the cluster's broker that signs as `ak` (None: unsigned)."""
    return BrokerClient(handle.addr, RemotingClient(signer=Signer(ak, sk) if ak is not None else None))
