"""Starting OUR real broker (and NameServer) on 127.0.0.1 port 0, and a client speaking its wire protocol."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.broker.bodies import ConsumerData, HeartbeatData, SubscriptionData
from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.headers import (
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from store.engine import DefaultMessageStore
from store.record import encode_properties
from tests.support.namesrv import namesrv_config


def broker_config(root: Path, **overrides: Any) -> BrokerConfig:
    """A small, fast broker config for tests: loopback, port 0, tiny files, metrics on a free port."""
    values: dict[str, Any] = {
        "broker_name": "broker-a",
        "broker_ip1": "127.0.0.1",
        "listen_host": "127.0.0.1",
        "listen_port": 0,
        "namesrv_addr": "",
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 4 * 1024 * 1024,
        "mapped_file_size_consume_queue": 20 * 10_000,
        "max_hash_slot_num": 1000,
        "max_index_num": 4000,
        "metrics_port": 0,
        "grpc_enable": False,  # tests of the 5.x front turn it on (tests/grpc)
        "grpc_listen_port": 0,
    }
    values.update(overrides)
    return BrokerConfig(**values)


def batch_entry(body: bytes, props: dict[str, str], flag: int = 0) -> bytes:
    """One inner message of a SEND_BATCH_MESSAGE body (docs/wire-protocol.md §send-bodies), as clients encode
    it."""
    p = encode_properties(props)
    return (
        struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, flag, len(body))
        + body
        + struct.pack(">h", len(p))
        + p
    )


async def start_broker(root: Path, **overrides: Any) -> Broker:
    broker = Broker(broker_config(root, **overrides))
    await broker.start()
    return broker


def send_fields(
    topic: str,
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    props: dict[str, str] | None = None,
    group: str = "PG",
    reconsume_times: int | None = None,
    max_reconsume_times: int | None = None,
    batch: bool = False,
) -> dict[str, str]:
    """The extFields of a SEND_MESSAGE_V2 as a producer of `group` sends it."""
    properties = dict(props or {})
    if tags is not None:
        properties["TAGS"] = tags
    if keys is not None:
        properties["KEYS"] = keys
    properties.setdefault("WAIT", "true")
    header = SendMessageRequestHeaderV2(
        "PG" if group is None else group,
        topic,
        "TBW102",
        4,
        queue_id,
        0,
        int(time.time() * 1000),
        0,
        encode_properties(properties).decode(),
        reconsume_times,
        False,
        max_reconsume_times,
        batch,
    )
    return header.to_ext_fields()


@dataclass
class BrokerClient:
    """A remoting client plus helpers that speak the broker's wire protocol to `addr`."""

    addr: str
    client: RemotingClient

    async def call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float = 5.0,
        oneway: bool = False,
    ) -> RemotingCommand:
        return await self.client.invoke(
            self.addr, RemotingCommand.request(code, ext or {}, body, oneway=oneway), timeout
        )

    async def create_topic(self, topic: str, queues: int, perm: int = 6) -> None:
        """UPDATE_AND_CREATE_TOPIC with ``queues`` read and write queues; it must succeed."""
        header = CreateTopicRequestHeader(topic, "TBW102", queues, queues, perm, "SINGLE_TAG")
        response = await self.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
        assert response.code == 0, response.remark

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        code: int = RequestCode.SEND_MESSAGE_V2,
        timeout: float = 5.0,
        **options: Any,
    ) -> RemotingCommand:
        """Send `body` to `topic`; `options` are `send_fields`' (queue_id, tags, keys, props, group...)."""
        return await self.call(code, send_fields(topic, **options), body, timeout)

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_nums: int = 32,
        sys_flag: int = 0x4,
        subscription: str = "*",
        suspend_ms: int = 0,
        commit_offset: int = 0,
        timeout: float = 5.0,
    ) -> RemotingCommand:
        header = PullMessageRequestHeader(
            group,
            topic,
            queue_id,
            offset,
            max_nums,
            sys_flag,
            commit_offset,
            suspend_ms,
            0,
            subscription,
            "TAG",
        )
        return await self.call(RequestCode.PULL_MESSAGE, header.to_ext_fields(), timeout=timeout)

    async def heartbeat(self, client_id: str, group: str, topics: list[str]) -> RemotingCommand:
        subs = [SubscriptionData(t, "*", sub_version=int(time.time() * 1000)) for t in topics]
        data = HeartbeatData(client_id, [], [ConsumerData(group, subscription_data_set=subs)])
        return await self.call(RequestCode.HEART_BEAT, body=data.dumps())


@dataclass
class BrokerHandle(BrokerClient):
    """A broker running in this process, and a client for it."""

    broker: Broker


@dataclass
class ClusterHandle(BrokerHandle):
    """A real NameServer with a real broker registered to it."""

    namesrv: NamesrvController

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"


async def start_cluster(tmp_path: Path, **broker_overrides: Any) -> ClusterHandle:
    """NameServer and broker on free loopback ports; stop with `stop_cluster`."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    try:
        broker = await start_broker(
            tmp_path / "store", namesrv_addr=f"127.0.0.1:{namesrv.port}", **broker_overrides
        )
    except BaseException:
        await namesrv.stop()
        raise
    return ClusterHandle(broker.addr, RemotingClient(), broker, namesrv)


async def stop_cluster(cluster: ClusterHandle) -> None:
    await cluster.client.close()
    try:
        await cluster.broker.stop()
    finally:
        await cluster.namesrv.stop()


async def replicated(master: Broker, slave: Broker, timeout: float = 15.0) -> None:
    """Wait until ``slave`` holds and has dispatched all of ``master``'s CommitLog, with its topics and
    offsets synced (what a client falling back to the slave then reads); fail the test after ``timeout``."""
    store = slave.store
    assert isinstance(store, DefaultMessageStore)
    await slave.sync_from_master()
    end = master.store.max_phy_offset
    deadline = asyncio.get_running_loop().time() + timeout
    while not (store.max_phy_offset == end and store.reput_from_offset >= end):
        assert asyncio.get_running_loop().time() < deadline, f"slave at {store.reput_from_offset} of {end}"
        await asyncio.sleep(0.05)
