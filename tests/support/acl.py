"""Accounts and a plain_acl.yml for ACL tests, and clients that sign as one of them."""

from __future__ import annotations

from pathlib import Path

from daemon.acl.signature import Signer
from daemon.remoting.client import RemotingClient
from tests.support.broker import BrokerClient, ClusterHandle

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


async def as_account(handle: ClusterHandle, ak: str | None, sk: str = "") -> BrokerClient:
    """A client of the cluster's broker that signs as `ak` (None: unsigned)."""
    return BrokerClient(handle.addr, RemotingClient(signer=Signer(ak, sk) if ak is not None else None))
