"""Master/slave replication with real daemons on 127.0.0.1 (docs/replication.md §replication): byte-identical
CommitLogs, pulls served by the slave, SYNC_MASTER acknowledgements, torn frames, a slave restarted empty,
refusals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import store.supervise as supervise_module
from daemon.acl.signature import Signer
from daemon.broker import ha
from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.ha import SLAVE_ADMIN_REMARK
from daemon.broker.metrics import _slave_lags
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import ClusterInfo, KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.api import MessageStore
from store.config import SLAVE, SYNC_MASTER
from store.engine import DefaultMessageStore
from store.ha import encode_frame, encode_report
from store.memory import InMemoryMessageStore
from store.models import SubscriptionGroupConfig
from store.record import decode_records
from tests.support.broker import BrokerClient, broker_config, start_broker
from tests.support.load import Acked, send_until_dead
from tests.support.namesrv import Namesrv, namesrv_config
from tests.support.paths import ROOT
from tests.support.ports import free_block, free_port
from tests.support.transport import reset_as_they_open
from tests.support.up import mqctl_up
from tests.support.waiting import wait_until

FILE = 256 * 1024
SMALL = {"mapped_file_size_commit_log": FILE, "ha_listen_port": 0, "ha_send_heartbeat_interval": 500}


@dataclass
class Group:
    namesrv: NamesrvController
    master: Broker
    slave: Broker
    client: RemotingClient

    @property
    def ns_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv.port}"

    def on(self, broker: Broker) -> BrokerClient:
        return BrokerClient(broker.addr, self.client)


async def start_slave(root: Path, ns_addr: str, **overrides: Any) -> Broker:
    values = {**SMALL, "broker_id": 1, "broker_role": SLAVE, "namesrv_addr": ns_addr, **overrides}
    return await start_broker(root, **values)


@contextlib.asynccontextmanager
async def master_and_slave(
    tmp_path: Path, *, signer: Signer | None = None, slave: dict[str, Any] | None = None, **master: Any
) -> AsyncIterator[Group]:
    """A NameServer, a master (``master`` overrides its config) and its slave (``slave`` its), in
    ``tmp_path``'s ``master`` and ``slave``; the ones the test left running in the group are stopped at the
    end."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    first = await start_broker(tmp_path / "master", **{**SMALL, "namesrv_addr": ns, **master})
    g = Group(
        namesrv,
        first,
        await start_slave(tmp_path / "slave", ns, **(slave or {})),
        RemotingClient(signer=signer),
    )
    try:
        yield g
    finally:
        await g.client.close()
        await g.slave.stop()
        await g.master.stop()
        await namesrv.stop()


@pytest.fixture
async def group(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Group]:
    async with master_and_slave(tmp_path, broker_role=getattr(request, "param", "ASYNC_MASTER")) as g:
        ha = g.master.ha_master
        assert ha is not None  # a SYNC_MASTER's first send needs its slave in
        await wait_until(lambda: bool(ha.slaves))
        yield g


def scrape(port: int | None) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def commitlog_files(broker: Broker) -> dict[str, bytes]:
    store = broker.store
    assert isinstance(store, DefaultMessageStore)
    store.commit_log.flush()
    d = Path(store.config.commit_log_dir)
    return {name: (d / name).read_bytes() for name in sorted(os.listdir(d))}


def caught_up(g: Group) -> bool:
    """The slave has the master's bytes and has dispatched them all."""
    end = g.master.store.max_phy_offset
    slave = g.slave.store
    assert isinstance(slave, DefaultMessageStore)
    return slave.max_phy_offset == end and slave.reput_from_offset >= end


async def pull_all(client: BrokerClient, topic: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        r = await client.pull("G", topic, queue_id, offset, max_nums=32)
        if r.code != ResponseCode.SUCCESS:
            return out
        out += [m.body for m in decode_records(r.body)]
        offset = int(r.ext_fields["nextBeginOffset"])


async def test_slave_replicates_byte_identical_and_serves_pulls(group: Group) -> None:
    g = group
    assert g.slave.ha_slave is not None and g.master.ha_master is not None
    assert (
        g.slave.ha_slave.master_addr == f"127.0.0.1:{g.master.config.ha_listen_port}"
    )  # from the NameServer
    assert g.master.config.ha_listen_port != 0
    master = g.on(g.master)
    sent: dict[int, list[bytes]] = {q: [] for q in range(4)}
    for i in range(600):
        body = os.urandom(200 + i % 1000)
        r = await master.send("Rep", body, queue_id=i % 4, keys=f"k{i}")
        assert r.code == ResponseCode.SUCCESS, r.remark
        sent[i % 4].append(body)
    await wait_until(lambda: caught_up(g))
    files = commitlog_files(g.master)
    assert len(files) >= 2  # rolled: the filler travelled too
    assert commitlog_files(g.slave) == files
    await g.slave.sync_from_master()
    assert g.slave.topics.get("Rep") is not None
    slave = g.on(g.slave)
    for q in range(4):
        assert await pull_all(slave, "Rep", q) == sent[q]
    ha = g.master.ha_master.status()
    assert len(ha) == 1 and ha[0].acked_offset == g.master.store.max_phy_offset and ha[0].lag_seconds == 0


def in_memory(config: BrokerConfig) -> MessageStore:
    return InMemoryMessageStore(config.store_config(), store_host=(config.broker_ip1, config.listen_port))


async def test_brokers_on_the_in_memory_store_replicate(tmp_path: Path) -> None:
    """HA runs on whatever store the broker has (no isinstance): a SYNC_MASTER and its slave on in-memory
    stores, each send answered after the slave acked it, and the slave serves the same messages."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    client = RemotingClient()
    master = Broker(
        broker_config(tmp_path / "m", namesrv_addr=ns, broker_role=SYNC_MASTER, **SMALL),
        store_factory=in_memory,
    )
    await master.start()
    slave_config = broker_config(tmp_path / "s", namesrv_addr=ns, broker_id=1, broker_role=SLAVE, **SMALL)
    slave = Broker(slave_config, store_factory=in_memory)
    await slave.start()
    try:
        assert isinstance(master.store, InMemoryMessageStore) and isinstance(
            slave.store, InMemoryMessageStore
        )
        assert master.ha_master is not None and slave.ha_slave is not None
        await wait_until(lambda: bool(master.ha_master and master.ha_master.slaves))
        sent: dict[int, list[bytes]] = {q: [] for q in range(4)}
        for i in range(40):
            body = os.urandom(100 + i * 37)
            r = await BrokerClient(master.addr, client).send("MemRep", body, queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark  # not FLUSH_SLAVE_TIMEOUT: the slave acked
            sent[i % 4].append(body)
        assert master.ha_master.sync_outcomes["PUT_OK"] == 40
        await wait_until(lambda: slave.store.get_max_offset("MemRep", 3) == 10)
        await slave.sync_from_master()
        on_slave = BrokerClient(slave.addr, client)
        for q in range(4):
            assert await pull_all(on_slave, "MemRep", q) == sent[q]
    finally:
        await client.close()
        await slave.stop()
        await master.stop()
        await namesrv.stop()


async def test_slave_refuses_writes(group: Group) -> None:
    slave = group.on(group.slave)
    r = await slave.send("Rep", b"x")
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE
    create = {
        "topic": "NewT",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    r = await slave.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create)
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, SLAVE_ADMIN_REMARK)
    assert group.slave.topics.get("NewT") is None
    assert group.slave.store.max_phy_offset == 0


async def test_slave_registers_as_slave(group: Group) -> None:
    request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    r = await group.client.invoke(group.ns_addr, request, 5.0)
    assert r.code == ResponseCode.SUCCESS
    data = ClusterInfo.loads(r.body).broker_addr_table["broker-a"]
    assert data.broker_addrs == {0: group.master.addr, 1: group.slave.addr}


async def test_a_slave_told_its_master_s_ha_address_is_admitted_at_its_first_connection(
    tmp_path: Path,
) -> None:
    """``haMasterAddress`` names the master before the slave has registered; the master admits only slaves
    its NameServers list, so a slave that connected at once was refused and got in a reconnect delay later.
    It connects once it has registered: the first connection is the one admitted."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    master = await start_broker(tmp_path / "master", **{**SMALL, "namesrv_addr": ns})
    slave = None
    try:
        assert master.ha_master is not None
        slave = await start_slave(tmp_path / "slave", ns, ha_master_address=master.config.ha_server_addr)
        replica = slave.ha_slave
        assert replica is not None
        await wait_until(lambda: replica.connected, 10)
        assert (master.ha_master.refused, replica.reconnects) == (0, 0)
    finally:
        if slave is not None:
            await slave.stop()
        await master.stop()
        await namesrv.stop()


async def test_a_slave_whose_replication_raised_what_it_does_not_expect_says_so_and_replicates_again(
    group: Group, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the slave's session (an exception none of its handlers expects) ended its replication task
    for good and silently, while it still reported itself a slave: it is logged with its traceback, and
    the slave connects again and catches up."""
    g = group
    monkeypatch.setattr(supervise_module, "RESTART_DELAY", 0.05)
    replica = g.slave.ha_slave
    assert replica is not None
    real = ha.max_record_size
    raised: list[bool] = []

    def fails_once(config: Any) -> int:
        if not raised:
            raised.append(True)
            raise KeyError("a bug in the session")
        return real(config)

    monkeypatch.setattr(ha, "max_record_size", fails_once)
    master = g.master.ha_master
    assert master is not None
    for conn in list(master.connections):
        conn.writer.transport.abort()  # the slave's next session is the one that fails
    await wait_until(lambda: bool(raised), 10)
    await g.on(g.master).create_topic("T", 1)
    for i in range(5):
        assert (await g.on(g.master).send("T", f"m{i}".encode())).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g), 10)
    failures = [r for r in caplog.records if r.levelname == "ERROR" and "ha-client" in r.getMessage()]
    assert [r.exc_info[0] for r in failures if r.exc_info] == [KeyError]


async def test_metadata_sync_brings_topics_groups_and_offsets(group: Group) -> None:
    master = group.on(group.master)
    assert (await master.send("Meta", b"m", queue_id=0)).code == ResponseCode.SUCCESS
    commit = {"consumerGroup": "MG", "topic": "Meta", "queueId": "0", "commitOffset": "1"}
    assert (await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await group.slave.sync_from_master()
    assert group.slave.topics.get("Meta") is not None
    assert group.slave.offsets.query_offset("MG", "Meta", 0) == 1
    assert group.slave.groups.table.keys() >= group.master.groups.table.keys()
    assert await group.slave.sync_from_master() == []  # nothing new: nothing rewritten


async def test_a_groups_offsets_deleted_on_the_master_are_deleted_on_its_slave(group: Group) -> None:
    """4.9.8's ``putAll`` keeps them on the slave, and a client that finds no master reads them back."""
    master = group.on(group.master)
    assert (await master.send("Del", b"m", queue_id=0)).code == ResponseCode.SUCCESS
    for g in ("DG", "KG"):
        commit = {"consumerGroup": g, "topic": "Del", "queueId": "0", "commitOffset": "1"}
        assert (await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    group.slave.offsets.commit_offset("OWN", "Del", 0, 1)  # never the master's: kept
    await group.slave.sync_from_master()
    assert group.slave.offsets.query_offset("DG", "Del", 0) == 1
    delete = {"groupName": "DG", "removeOffset": "true"}
    assert (await master.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, delete)).code == ResponseCode.SUCCESS
    assert "ConsumerOffsetManager" in await group.slave.sync_from_master()
    assert group.slave.offsets.query_offset("DG", "Del", 0) == -1
    assert group.slave.offsets.query_offset("KG", "Del", 0) == 1
    assert group.slave.offsets.query_offset("OWN", "Del", 0) == 1


async def test_a_master_that_lost_its_offsets_does_not_wipe_its_slaves_copy(group: Group) -> None:
    """A master restarted on an older copy of its store (or with its offset files unreadable) still has
    the group and the topic: the slave's copy of the group's offsets, the only one left, was dropped."""
    master = group.on(group.master)
    assert (await master.send("Ord", b"m", queue_id=0)).code == ResponseCode.SUCCESS
    group.master.groups.put(SubscriptionGroupConfig("G1"))
    commit = {"consumerGroup": "G1", "topic": "Ord", "queueId": "0", "commitOffset": "1"}
    assert (await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await group.slave.sync_from_master()
    assert group.slave.offsets.query_offset("G1", "Ord", 0) == 1
    group.master.store.configs.consumer_offsets.table.clear()
    await group.slave.sync_from_master()
    assert group.slave.offsets.query_offset("G1", "Ord", 0) == 1


async def test_an_executed_offset_reset_says_its_slave_takes_it_at_the_next_sync(group: Group) -> None:
    """A failover before the slave's next metadata sync would serve the old offsets: the reset says so."""
    from mqctl.admin.client import Admin
    from mqctl.services.offsets import ResetTarget, reset

    master = group.on(group.master)
    for i in range(3):
        assert (await master.send("Rst", b"%d" % i, queue_id=0)).code == ResponseCode.SUCCESS
    commit = {"consumerGroup": "RG", "topic": "Rst", "queueId": "0", "commitOffset": "3"}
    assert (await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await group.slave.sync_from_master()
    await group.master.register_all()
    await group.slave.register_all()  # the route lists the slave
    async with Admin([group.ns_addr]) as admin:
        result = await reset(
            admin,
            "RG",
            "Rst",
            ResetTarget("earliest"),
            execute_plan=True,
            export_to=None,
            confirm=lambda _r: None,
        )
    assert f"the slaves or followers of {group.master.config.broker_name} take" in result["applied"]
    assert result["applied"].endswith("within 10 s: a failover before then undoes the reset there")
    assert group.slave.offsets.query_offset("RG", "Rst", 0) == 3
    await group.slave.sync_from_master()
    assert group.slave.offsets.query_offset("RG", "Rst", 0) == 0


async def test_metadata_sync_keeps_a_groups_5x_properties(group: Group) -> None:
    """A group made FIFO for 5.x clients (``consumeMessageOrderly``, a property 4.9.8 has not) stays FIFO
    on the slave, which a DLedger member elected later serves the group from."""
    import json

    made = {**json.loads(SubscriptionGroupConfig("OG").dumps()), "consumeMessageOrderly": True}
    body = json.dumps(made).encode()
    master = group.on(group.master)
    assert (await master.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)).code == 0
    await group.slave.sync_from_master()
    config = group.slave.groups.get("OG")
    assert config is not None and config.extra == {"consumeMessageOrderly": True}


async def test_metadata_sync_keeps_a_topics_5x_attributes(group: Group) -> None:
    """A topic made FIFO by a 5.x ``mqadmin updateTopic -a +message.type=FIFO`` is FIFO on the slave too:
    GET_ALL_TOPIC_CONFIG carries its ``attributes`` as a 5.x broker's does, and a slave or a DLedger
    member elected later serves it from the table it took."""
    import json

    from daemon.broker.headers import CreateTopicRequestHeader

    header = CreateTopicRequestHeader(
        "FifoT", "TBW102", 2, 2, 6, "SINGLE_TAG", attributes="+message.type=FIFO"
    )
    master = group.on(group.master)
    created = await master.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
    assert created.code == 0, created.remark
    body = json.loads((await master.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
    assert body["topicConfigTable"]["FifoT"]["attributes"] == {"message.type": "FIFO"}
    await group.slave.sync_from_master()
    config = group.slave.topics.get("FifoT")
    assert config is not None and config.attributes == {"message.type": "FIFO"}
    assert config.message_type == "FIFO"


async def test_slave_restarted_empty_re_replicates_from_the_last_file(group: Group, tmp_path: Path) -> None:
    g = group
    master = g.on(g.master)
    for i in range(400):
        assert (await master.send("Again", os.urandom(1500), queue_id=i % 2)).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g))
    await g.slave.stop()
    shutil.rmtree(tmp_path / "slave")
    g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
    await wait_until(lambda: caught_up(g))
    master_files = commitlog_files(g.master)
    slave_files = commitlog_files(g.slave)
    assert len(master_files) >= 3
    last = list(master_files)[-1]
    assert list(slave_files) == [last]  # 4.9.8: an empty slave starts at the master's last file
    assert slave_files[last] == master_files[last]
    for _ in range(20):  # and follows new data from there
        assert (await master.send("Again", os.urandom(900), queue_id=0)).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g))
    assert commitlog_files(g.slave)[last] == commitlog_files(g.master)[last]


@pytest.mark.parametrize("group", [SYNC_MASTER], indirect=True)
async def test_sync_master_answers_after_the_slave_acked(group: Group) -> None:
    g = group
    master = g.on(g.master)
    for i in range(50):
        r = await master.send("Sync", f"m{i}".encode(), queue_id=0)
        assert r.code == ResponseCode.SUCCESS, r.remark
        end = g.master.store.max_phy_offset
        assert g.slave.store.max_phy_offset >= end  # the slave had it before the answer
    assert g.master.ha_master is not None and g.master.ha_master.push2slave_max_offset >= end
    text = await asyncio.to_thread(scrape, g.master.metrics_port)
    assert 'rocketmq_ha_connected_slaves{broker="broker-a",cluster="DefaultCluster"} 1.0' in text
    assert (
        'rocketmq_ha_sync_waits_total{broker="broker-a",cluster="DefaultCluster",status="PUT_OK"} 50.0'
        in text
    )
    assert "rocketmq_ha_slave_lag_bytes{" in text
    slave_text = await asyncio.to_thread(scrape, g.slave.metrics_port)
    assert 'rocketmq_ha_master_connected{broker="broker-a",cluster="DefaultCluster"} 1.0' in slave_text
    r = await master.send("Sync", b"nowait", queue_id=0, props={"WAIT": "false"})
    assert r.code == ResponseCode.SUCCESS
    assert g.master.ha_master.notify in g.master.hold.wakers  # woken by every arrival meanwhile
    await g.slave.stop()
    await wait_until(lambda: not g.master.ha_master.connections)  # type: ignore[union-attr]
    assert g.master.ha_master.notify not in g.master.hold.wakers  # no slave: a send pays nothing for HA
    r = await master.send("Sync", b"alone", queue_id=0)
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE  # stored, but no slave has it
    assert r.ext_fields["queueOffset"] == "51"


def _lag_labels(text: str) -> set[str]:
    return {
        line.split("{", 1)[1].split("}", 1)[0]
        for line in text.splitlines()
        if line.startswith("rocketmq_ha_slave_lag_bytes{")
    }


@pytest.mark.slow
async def test_metrics_label_each_slave_by_what_it_registered_across_reconnects(
    group: Group, tmp_path: Path
) -> None:
    """Two slaves on one host: /metrics names each by its registered address and brokerId, not by its HA
    connection's source port (a new series at every reconnect), and a reconnect keeps its series."""
    g = group
    second = await start_slave(tmp_path / "slave2", g.ns_addr, broker_id=2)
    try:
        master = g.master.ha_master
        assert master is not None

        def told() -> bool:
            return len(master.connections) == 2 and all(c.registered for c in master.connections)

        await wait_until(told, 30)
        want = {
            f'broker="broker-a",cluster="DefaultCluster",slave="{g.slave.addr}",slave_id="1"',
            f'broker="broker-a",cluster="DefaultCluster",slave="{second.addr}",slave_id="2"',
        }
        assert _lag_labels(await asyncio.to_thread(scrape, g.master.metrics_port)) == want
        first = next(c for c in master.connections if c.registered == (second.addr, 2))
        first.writer.close()
        await wait_until(lambda: first not in master.connections and told(), 30)
        assert _lag_labels(await asyncio.to_thread(scrape, g.master.metrics_port)) == want
    finally:
        await second.stop()


def test_slaves_the_master_cannot_tell_apart_share_their_host_s_series() -> None:
    slaves = [
        ha.SlaveState("10.0.0.5:40001", 100, 100, 0, 0.0),
        ha.SlaveState("10.0.0.5:40002", 40, 40, 0, 0.0),
        ha.SlaveState("10.0.0.6:40003", 90, 90, 0, 0.0, ("10.0.0.6:10911", 1)),
    ]
    assert _slave_lags(slaves, 100) == {("10.0.0.5", ""): 60, ("10.0.0.6:10911", "1"): 10}


@pytest.mark.slow
async def test_sync_master_without_slave_and_with_a_silent_slave(tmp_path: Path) -> None:
    namesrv = Namesrv(NamesrvController(namesrv_config(tmp_path)), RemotingClient())
    await namesrv.controller.start()
    broker = await start_broker(
        tmp_path / "m", broker_role=SYNC_MASTER, slave_timeout=300, namesrv_addr=namesrv.addr, **SMALL
    )
    client = RemotingClient()
    try:
        assert broker.ha_master is not None
        master = BrokerClient(broker.addr, client)
        r = await master.send("S", b"a")
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and "msgId" in r.ext_fields
        # the HA gate admits this host only while the NameServer lists a slave of broker-a there
        r = await namesrv.register({}, broker_addr="127.0.0.1:1", broker_id=1)
        assert r.code == ResponseCode.SUCCESS
        # a slave that asks for offset 0 and never acks: the send times out waiting for it
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.config.ha_listen_port)
        writer.write(encode_report(broker.store.max_phy_offset))
        await writer.drain()
        ha = broker.ha_master
        await wait_until(lambda: any(c.acked_offset >= 0 for c in ha.status()))
        r = await master.send("S", b"b")
        assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        writer.close()
        # a slave reporting beyond the master's end is disconnected
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.config.ha_listen_port)
        writer.write(encode_report(broker.store.max_phy_offset + 1_000_000))
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
    finally:
        await client.close()
        await broker.stop()
        await namesrv.client.close()
        await namesrv.controller.stop()


async def test_a_report_sent_a_byte_at_a_time_is_closed_at_the_housekeeping_interval(tmp_path: Path) -> None:
    """An offset report must arrive whole within haHousekeepingInterval: a process on a slave's host (the
    HA gate admits the host) that sent its reports a byte at a time held the connection for ever, each
    byte counted as a sign of life. Whole reports keep a connection; the bytes of one begun do not."""
    namesrv = Namesrv(NamesrvController(namesrv_config(tmp_path)), RemotingClient())
    await namesrv.controller.start()
    broker = await start_broker(
        tmp_path / "m", namesrv_addr=namesrv.addr, **{**SMALL, "ha_housekeeping_interval": 4000}
    )
    try:
        r = await namesrv.register({}, broker_addr="127.0.0.1:1", broker_id=1)  # a slave on this host
        assert r.code == ResponseCode.SUCCESS
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.config.ha_listen_port)
        report = encode_report(broker.store.max_phy_offset)
        ended = asyncio.Event()

        async def read_heartbeats() -> None:
            while await reader.read(1 << 20):
                pass
            ended.set()

        heartbeats = asyncio.ensure_future(read_heartbeats())
        # whole reports 0.5 s apart: each one is a sign of life (a loop stalled for less than 3.5 s on a
        # busy host, the master's included, finds the next one in time)
        for _ in range(4):
            writer.write(report)
            await writer.drain()
            await asyncio.sleep(0.5)
        assert not ended.is_set()
        sent = 0
        for byte in report * 5:  # 0.7 s a byte: a report takes 5.6 s, over the interval
            if ended.is_set():
                break
            writer.write(bytes([byte]))
            sent += 1
            await asyncio.sleep(0.7)
        await asyncio.wait_for(ended.wait(), 10)
        await heartbeats
        assert sent < len(report) + 2  # closed before the first report sent so was whole (before: never)
        writer.close()
    finally:
        await broker.stop()
        await namesrv.client.close()
        await namesrv.controller.stop()


@pytest.mark.slow
async def test_torn_frame_never_writes_a_partial_record(tmp_path: Path) -> None:
    """A fake master sends one whole frame ending inside a record, then half a frame, then resets: the
    slave appends and acknowledges the whole record only."""
    source = await start_broker(tmp_path / "src", **SMALL)
    client = RemotingClient()
    try:
        src = BrokerClient(source.addr, client)
        for i in range(3):
            assert (await src.send("Torn", f"record-{i}".encode() * 30, queue_id=0)).code == 0
        store = source.store
        assert isinstance(store, DefaultMessageStore)
        raw = bytes(store.commit_log.files.files[0].view[: store.max_phy_offset])
    finally:
        await client.close()
        await source.stop()
    record = len(raw) // 3
    assert int.from_bytes(raw[:4], "big") == record  # three records of one size
    cut = record + record // 2  # inside the second record
    reports: list[bytes] = []
    appended: list[bytes] = []
    sessions = 0

    async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sessions
        sessions += 1
        reports.append(await reader.readexactly(8))
        if sessions == 1:
            # one write: the whole frame and, torn, the header and 10 bytes of the next
            writer.write(encode_frame(0, raw[:cut]) + encode_frame(cut, raw[cut:])[: 12 + 10])
            await writer.drain()
            while (report := await reader.readexactly(8)) == encode_report(0):  # heartbeats
                pass
            appended.append(report)  # the slave has read it all and appended what it could
            writer.transport.abort()
            return
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    slave = await start_broker(
        tmp_path / "slave", broker_role=SLAVE, broker_id=1, ha_master_address=f"127.0.0.1:{port}", **SMALL
    )
    try:
        await wait_until(lambda: sessions >= 2 and len(reports) >= 2)
        assert reports[0] == encode_report(0)
        # a frame may cut a record (HA frames are byte ranges): only the whole first record is appended
        # and acknowledged, the cut one waits for its rest, which this master never sends
        assert appended == [encode_report(record)]
        assert reports[1] == encode_report(record)  # and so it reports when it reconnects
        assert slave.store.max_phy_offset == record
        await wait_until(lambda: slave.store.get_max_offset("Torn", 0) == 1)
        slave_store = slave.store
        assert isinstance(slave_store, DefaultMessageStore)
        assert not await asyncio.to_thread(slave_store.dispatch_replica)
        assert slave_store.reput_from_offset == record and slave.store.get_max_offset("Torn", 0) == 1
        assert bytes(slave_store.commit_log.files.files[0].view[:cut]) == raw[:record] + bytes(cut - record)
    finally:
        await slave.stop()
        server.close()
        await server.wait_closed()


async def test_a_slave_whose_connection_was_reset_as_it_opened_connects_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master (or a proxy before it) that resets the slave's connection at once, as its HA gate does to a
    slave not registered yet: read before the connection was reported made, on uvloop the slave's
    look at the connection's names raised AttributeError, which ended its replication task for good (a
    SYNC_MASTER then answered SLAVE_NOT_AVAILABLE to every send). It is a failed connection: the slave
    connects again."""
    monkeypatch.setattr(ha, "RECONNECT_DELAY", 0.05)

    async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(64):  # the slave's reports
                pass
        writer.close()

    server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    made = reset_as_they_open(monkeypatch, port, times=2)
    slave = await start_broker(
        tmp_path / "slave", broker_role=SLAVE, broker_id=1, ha_master_address=f"127.0.0.1:{port}", **SMALL
    )
    try:
        assert slave.ha_slave is not None
        await wait_until(lambda: slave.ha_slave is not None and slave.ha_slave.connected, 10)
        assert len(made) == 3
    finally:
        await slave.stop()
        server.close()
        await server.wait_closed()


#: A broker process answering after its start: on a heavily loaded host its interpreter and imports alone
#: outlasted wait_until's default. (Waited for only while the process lives: its death fails at once.)
MASTER_STARTS_WITHIN = 90.0


@pytest.mark.slow
async def test_sigkill_sync_master_mid_send_loses_no_acknowledged_message(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns_addr = f"127.0.0.1:{namesrv.port}"
    port, ha_port = free_port(), free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-a\nbrokerIP1=127.0.0.1\nlistenHost=127.0.0.1\nlistenPort={port}\n"
        f"haListenPort={ha_port}\nnamesrvAddr={ns_addr}\nbrokerRole=SYNC_MASTER\n"
        f"storePathRootDir={tmp_path / 'master'}\nmappedFileSizeCommitLog={FILE}\nmetricsEnable=false\n"
    )
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    log = tmp_path / "master.log"

    def start_master() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(argv, cwd=ROOT, env=cli_env, stdout=out, stderr=out)

    def log_tail() -> str:
        return log.read_text(errors="replace")[-3000:]

    proc = start_master()
    client = RemotingClient()
    addr = f"127.0.0.1:{port}"
    master = BrokerClient(addr, client)
    slave: Broker | None = None
    acked: Acked = []

    async def master_up() -> bool:
        assert proc.poll() is None, f"the master exited ({proc.returncode}):\n{log_tail()}"
        try:
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0)
        except Exception:
            return False
        return r.code == ResponseCode.SUCCESS

    async def master_counts_its_slave() -> bool:
        """The master admitted the slave (after asking the NameServer about it): its SYNC sends wait for
        it from now on, where before they answered SLAVE_NOT_AVAILABLE. (The slave's own ``connected``
        comes first, as its connect returns: on a loaded host, sends then met the master still asking.)"""
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0)
        return int(KVTable.loads(r.body).table.get("haSlaveCount", "0")) >= 1

    try:
        await wait_until(master_up, MASTER_STARTS_WITHIN, log_tail)
        slave = await start_slave(tmp_path / "slave", ns_addr)
        assert slave.ha_slave is not None
        await wait_until(master_counts_its_slave)
        assert (await master.send("Kill", b"first", queue_id=0)).code == ResponseCode.SUCCESS
        await slave.sync_from_master()
        assert slave.topics.get("Kill") is not None

        senders = [
            asyncio.create_task(
                send_until_dead(master, "Kill", n, lambda n, i: f"{n}-{i}-".encode() * 20, acked)
            )
            for n in range(8)
        ]
        await wait_until(lambda: len(acked) >= 300)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        await asyncio.gather(*senders)
        on_slave = BrokerClient(slave.addr, client)
        last: dict[int, int] = {}
        for queue_id, offset, _body in acked:
            last[queue_id] = max(last.get(queue_id, 0), offset)
        replica = slave
        for queue_id, offset in last.items():  # dispatch runs apart from the acks: let it finish

            def dispatched(q: int = queue_id, o: int = offset) -> bool:
                return replica.store.get_max_offset("Kill", q) > o

            await wait_until(dispatched)
        for queue_id, offset, body in acked:
            pulled = await on_slave.pull("KG", "Kill", queue_id, offset, max_nums=1)
            assert pulled.code == ResponseCode.SUCCESS, (queue_id, offset, pulled.remark)
            assert decode_records(pulled.body)[0].body == body

        # the master returns: the slave reconnects and catches up, no byte duplicated or skipped
        proc = start_master()
        await wait_until(master_up, MASTER_STARTS_WITHIN, log_tail)

        async def replicated_send() -> bool:  # SLAVE_NOT_AVAILABLE (stored) until the slave is back
            return (await master.send("Kill", b"back", queue_id=1)).code == ResponseCode.SUCCESS

        await wait_until(replicated_send)
        for i in range(50):
            assert (await master.send("Kill", f"after-{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
        d = tmp_path / "master" / "commitlog"

        def same_files() -> bool:
            assert slave is not None
            store = slave.store
            assert isinstance(store, DefaultMessageStore)
            store.commit_log.flush()
            theirs = {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}
            own = Path(store.config.commit_log_dir)
            return theirs == {n: (own / n).read_bytes() for n in sorted(os.listdir(own))}

        await wait_until(same_files)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        await client.close()
        if slave is not None:
            await slave.stop()
        await namesrv.stop()


async def test_slave_pull_keeps_the_consumers_offset(group: Group) -> None:
    g = group
    master = g.on(g.master)
    assert (await master.send("Lag", b"one", queue_id=0)).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g))
    await g.slave.sync_from_master()
    slave = g.on(g.slave)
    r = await slave.pull("LG", "Lag", 0, 5, sys_flag=0x1 | 0x4, commit_offset=5)
    # the master's answer would be OFFSET_OVERFLOW_BADLY (21, next 1); a lagging slave must not move it
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert r.ext_fields["nextBeginOffset"] == "5"
    assert r.ext_fields["suggestWhichBrokerId"] == "0"
    assert g.slave.offsets.query_offset("LG", "Lag", 0) == -1  # a slave does not take pull commits
    r = await slave.pull("LG", "Lag", 0, 0)
    assert r.code == ResponseCode.SUCCESS and [m.body for m in decode_records(r.body)] == [b"one"]


@pytest.mark.slow
async def test_up_with_a_slave_and_ha_status(tmp_path: Path, cli_env: dict[str, str]) -> None:
    # master and slave, each with its VIP port two below and its HA port one above
    ns_port, broker_port = free_port(), free_block(8) + 2
    args = ["--slaves", "1", "--broker-port", str(broker_port), "--metrics-port", "0"]
    async with mqctl_up(tmp_path / "data", cli_env, ns_port, *args) as up:
        slave_addr = f"127.0.0.1:{broker_port + 4}"
        assert f"slave {slave_addr}" in up.ready
        listed = await asyncio.to_thread(up.mq, "cluster", "list")
        assert [(r["broker_id"], r["addr"], r["role"]) for r in listed] == [
            (0, f"127.0.0.1:{broker_port}", "MASTER"),
            (1, slave_addr, "SLAVE"),
        ]

        async def connected() -> bool:
            rows = await asyncio.to_thread(up.mq, "broker", "ha", "status")
            return all(r["connected"] for r in rows) and all(r["lag_bytes"] == 0 for r in rows)

        await wait_until(connected)
        rows = await asyncio.to_thread(up.mq, "broker", "ha", "status")
        assert [r["role"] for r in rows] == ["ASYNC_MASTER", "SLAVE"]
        # each names the other by its broker address; the HA connection's addresses beside (a master saw
        # its slave's source port, and listed that as its peer)
        assert [r["peers"] for r in rows] == [f"{slave_addr} (id 1)", f"127.0.0.1:{broker_port} (id 0)"]
        assert rows[1]["peer_ha_addrs"] == f"127.0.0.1:{broker_port + 1}"  # the master's HA port
        ha_client = rows[0]["peer_ha_addrs"]
        assert ha_client.startswith("127.0.0.1:") and ha_client not in (slave_addr, rows[0]["addr"])
        assert rows[0]["lag_seconds"] == 0.0 and rows[1]["lag_bytes"] == 0
        # the table fits a terminal (it was about 300 columns): what tells whether replication is well
        table = await asyncio.to_thread(up.text, "broker", "ha", "status")
        assert max(map(len, table.splitlines())) <= 120, table
        assert "PEERS" in table and f"{slave_addr} (id 1)" in table and "COMMITLOG" not in table
        wide = await asyncio.to_thread(up.text, "-o", "wide", "broker", "ha", "status")
        assert "COMMITLOG MAX OFFSET" in wide and "PEER HA ADDRS" in wide and ha_client in wide
        status = await asyncio.to_thread(up.mq, "cluster", "status")
        assert [s["ha_lag_bytes"] for s in status] == [None, 0]
    assert up.code == 0


async def test_taken_listen_port_plus_one_falls_back_to_a_free_ha_port(tmp_path: Path) -> None:
    base = free_block(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        broker = await start_broker(tmp_path / "m", listen_port=base)
        try:
            assert broker.config.ha_listen_port not in (0, base + 1)
            assert broker.config.ha_server_addr == f"127.0.0.1:{broker.config.ha_listen_port}"
        finally:
            await broker.stop()
        with pytest.raises(OSError):  # a configured haListenPort that is taken stops the start
            await start_broker(tmp_path / "m2", listen_port=0, ha_listen_port=base + 1)


async def test_offset_committed_to_the_slave_while_the_master_is_down_reaches_the_master(
    group: Group, tmp_path: Path
) -> None:
    """4.9.8 would overwrite the slave's commit with the master's older offset at the next sync and leave
    the master at it (a consumer restarted meanwhile re-consumes); the slave hands it on instead."""
    g = group
    master = g.on(g.master)
    for i in range(6):
        assert (await master.send("Back", b"%d" % i, queue_id=0)).code == ResponseCode.SUCCESS
    commit = {"consumerGroup": "BG", "topic": "Back", "queueId": "0", "commitOffset": "1"}
    assert (await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g))
    await g.slave.sync_from_master()
    assert g.slave.offsets.query_offset("BG", "Back", 0) == 1
    port = int(g.master.addr.rsplit(":", 1)[1])
    await g.master.stop()
    slave = g.on(g.slave)
    commit["commitOffset"] = "4"  # the client found no master in the route
    assert (await slave.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    assert await g.slave.sync_from_master() == []  # the master is down: nothing changes, nothing is lost
    assert g.slave.offsets.query_offset("BG", "Back", 0) == 4
    g.master = await start_broker(tmp_path / "master", namesrv_addr=g.ns_addr, listen_port=port, **SMALL)
    assert g.master.offsets.query_offset("BG", "Back", 0) == 1  # what the master had
    await g.slave.register_all()
    await g.slave.sync_from_master()
    assert g.master.offsets.query_offset("BG", "Back", 0) == 4
    assert g.slave.offsets.query_offset("BG", "Back", 0) == 4
    # handed on once; and never backwards: the consumer moved on at the master, a stale slave commit stays
    commit["commitOffset"] = "6"
    assert (
        await g.on(g.master).call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)
    ).code == ResponseCode.SUCCESS
    commit["commitOffset"] = "5"
    assert (await slave.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await g.slave.sync_from_master()
    assert g.master.offsets.query_offset("BG", "Back", 0) == 6
    assert g.slave.offsets.query_offset("BG", "Back", 0) == 6
    assert g.slave.slave_commits == {}


async def restart_sync_master(
    tmp_path: Path,
    topic: str,
    ha_ports: tuple[int, int],
    while_down: Callable[[Group], Awaitable[None]] | None = None,
) -> None:
    """A NameServer and a SYNC_MASTER on HA port ``ha_ports[0]`` with its slave in, stopped (``while_down`` then runs) and
    started again on its broker port and HA port ``ha_ports[1]``: its slave is back, and a send to
    ``topic`` acknowledged, within a bound well under the slave's registration period, so its next
    registration is not what helps."""
    async with master_and_slave(tmp_path, broker_role=SYNC_MASTER, ha_listen_port=ha_ports[0]) as g:
        ha = g.master.ha_master
        assert ha is not None
        await wait_until(lambda: bool(ha.slaves))
        assert (await g.on(g.master).send(topic, b"before")).code == ResponseCode.SUCCESS
        port = int(g.master.addr.rsplit(":", 1)[1])
        await g.master.stop()
        if while_down is not None:
            await while_down(g)
        keys = {**SMALL, "broker_role": SYNC_MASTER, "ha_listen_port": ha_ports[1]}
        g.master = await start_broker(tmp_path / "master", namesrv_addr=g.ns_addr, listen_port=port, **keys)
        back = g.master.ha_master
        assert back is not None
        await wait_until(lambda: bool(back.slaves), 15, lambda: f"slave: {g.slave.runtime_info()}")
        assert g.slave.master_addr == g.master.addr
        assert g.slave.ha_slave is not None and g.slave.ha_slave.master_addr == f"127.0.0.1:{ha_ports[1]}"
        assert (await g.on(g.master).send(topic, b"after")).code == ResponseCode.SUCCESS


async def test_a_slave_that_registered_while_its_master_was_down_replicates_as_soon_as_it_is_back(
    tmp_path: Path,
) -> None:
    """The slave's registration answered while no master was listed leaves it without its master's broker
    address, which the check of its tail before each connection asks: it asks the NameServers for it
    instead of waiting for its next registration (a period away), so a restarted SYNC_MASTER counts its
    slave again, and acknowledges sends, as soon as it is back."""

    async def registered(g: Group) -> None:
        await g.slave.register_all()  # as its periodic registration may, while the master is down
        assert g.slave.master_addr is None

    ha_port = free_port()
    await restart_sync_master(tmp_path, "Back", (ha_port, ha_port), registered)


async def test_a_master_back_on_another_ha_port_has_its_slave_back_before_the_next_registration(
    tmp_path: Path,
) -> None:
    """The master restarted on the same broker port but another HA port: the slave's connects to the HA
    address it knows are refused, and it learnt the new one only from its next registration's answer, a
    period (30 s) later, a SYNC_MASTER answering SLAVE_NOT_AVAILABLE meanwhile. A refused connect now
    makes it ask its NameServers before the next try."""
    await restart_sync_master(tmp_path, "Moved", (free_port(), free_port()))


@pytest.mark.slow
async def test_queries_fall_back_to_the_slave_when_the_master_is_down(
    group: Group, cli_env: dict[str, str]
) -> None:
    g = group
    master = g.on(g.master)
    r = await master.send("Ask", b"answer", queue_id=0, keys="the-key")
    assert r.code == ResponseCode.SUCCESS
    msg_id = r.ext_fields["msgId"]
    commit = {"consumerGroup": "AskG", "topic": "Ask", "queueId": "0", "commitOffset": "1"}
    assert (await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    await wait_until(lambda: caught_up(g))
    await g.slave.sync_from_master()
    await g.master.stop()
    env = {**cli_env, "NAMESRV_ADDR": g.ns_addr}

    def mq(*args: str, command: tuple[str, ...] = ("msg", "query")) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "mqctl", *command, *args, "-o", "json"]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    by_key = await asyncio.to_thread(mq, "-t", "Ask", "--key", "the-key")
    assert by_key.returncode == 0, by_key.stderr
    assert [m["msg_id"] for m in json.loads(by_key.stdout)] == [msg_id]
    assert f"master is down; reading from slave 1 at {g.slave.addr}" in by_key.stderr
    by_id = await asyncio.to_thread(mq, "--id", msg_id)
    assert by_id.returncode == 0, by_id.stderr
    assert json.loads(by_id.stdout)["msg_id"] == msg_id
    assert f"read from slave 1 at {g.slave.addr}" in by_id.stderr
    offsets = await asyncio.to_thread(mq, "-g", "AskG", "-t", "Ask", command=("offset", "show"))
    assert offsets.returncode == 0, offsets.stderr
    first = json.loads(offsets.stdout)[0]
    assert (first["queue_id"], first["consumer_offset"], first["max_offset"]) == (0, 1, 1)
    assert "reading from slave 1" in offsets.stderr
    progress = await asyncio.to_thread(mq, "-g", "AskG", command=("group", "progress"))
    assert progress.returncode == 0, progress.stderr
    assert any(p["queue_id"] == 0 and p["consumer_offset"] == 1 for p in json.loads(progress.stdout))
    assert "reading from slave 1" in progress.stderr


async def test_slave_read_suggests_the_groups_broker_or_the_slow_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import daemon.broker.processors.pull as pull_module

    for memory, expected in ((1 << 40, "0"), (0, "1")):  # cold data: whichBrokerWhenConsumeSlowly (1)
        monkeypatch.setattr(pull_module, "_memory_bytes", lambda m=memory: m)
        broker = await start_broker(tmp_path / f"m{memory}", slave_read_enable=True)
        client = RemotingClient()
        try:
            b = BrokerClient(broker.addr, client)
            for i in range(3):
                assert (await b.send("Read", f"m{i}".encode(), queue_id=0)).code == ResponseCode.SUCCESS
            r = await b.pull("RG", "Read", 0, 0, max_nums=1)
            assert r.code == ResponseCode.SUCCESS
            assert r.ext_fields["suggestWhichBrokerId"] == expected
        finally:
            await client.close()
            await broker.stop()


def test_top_shows_replication_in_the_role_cell() -> None:
    from mqctl.top import format as fmt
    from mqctl.top.model import BrokerView

    def role(**ha: Any) -> str:
        return fmt.broker_cells(BrokerView("C", "broker-a", ha.pop("broker_id", 0), "h:1", "V4_9_8", **ha))[1]

    assert role() == "master"
    assert role(ha_slaves=2) == "master (2 slaves)"
    assert role(broker_id=1, ha_connected=True, ha_lag_bytes=1536) == "slave1 lag 1.5 KiB"
    assert role(broker_id=1, ha_connected=False, ha_lag_bytes=0) == "slave1 NOT REPLICATING"


async def test_role_and_ha_port_cannot_change_at_run_time(group: Group) -> None:
    for key, value in (("brokerRole", "ASYNC_MASTER"), ("brokerId", "0"), ("haListenPort", "1")):
        r = await group.on(group.slave).call(
            RequestCode.UPDATE_BROKER_CONFIG, body=f"{key}={value}\n".encode()
        )
        assert r.code == ResponseCode.NO_PERMISSION, key
    assert group.slave.config.broker_role == SLAVE and group.slave.store.config.broker_role == SLAVE
    assert (await group.on(group.slave).send("Rep", b"x")).code == ResponseCode.SERVICE_NOT_AVAILABLE


async def test_timers_are_the_masters_to_deliver_and_a_promoted_slave_takes_the_pending_ones_over(
    group: Group, tmp_path: Path
) -> None:
    g = group
    master = g.on(g.master)
    # with a unique key, as every client sets one: a promoted slave finds "soon"'s delivered copy by it
    # (without one it cannot tell, and delivers it again: at least once, docs/store-format.md)
    soon = {"TIMER_DELAY_MS": "200", "UNIQ_KEY": "7F0000010001000000000000000000A1"}
    later = {"TIMER_DELAY_SEC": "120", "UNIQ_KEY": "7F0000010001000000000000000000A2"}
    assert (await master.send("Tm", b"soon", props=soon)).code == ResponseCode.SUCCESS
    assert (await master.send("Tm", b"later", props=later)).code == ResponseCode.SUCCESS
    await wait_until(lambda: g.master.store.get_max_offset("Tm", 0) == 1)  # "soon" delivered by the master
    await wait_until(lambda: caught_up(g))
    slave_root = Path(g.slave.config.store_path_root_dir)
    assert g.slave.runtime_info()["timerPendingMessages"] == "0"  # a slave delivers nothing, shows nothing
    assert not (slave_root / "timer").exists()
    await g.slave.stop()
    promoted = await start_broker(slave_root, **SMALL)  # the slave's store, now a master's
    try:
        await wait_until(lambda: promoted.timers.pending == 1)
        assert [b.topic for b in promoted.timers.backlog()] == ["Tm"]
        await asyncio.sleep(0.3)
        assert promoted.store.get_max_offset("Tm", 0) == 1  # "soon" is not delivered a second time
    finally:
        await promoted.stop()
    g.slave = promoted  # stopped: the group's teardown stops it again harmlessly


def cancel_on_read_or_refusal(monkeypatch: pytest.MonkeyPatch, landing: list[asyncio.Task[None]]) -> None:
    """The HA client's connections (``asyncio.open_connection``: it alone uses it here) hand ``landing``'s
    task a cancellation in the very callback that delivers a read's data or a refused connect, once: a
    stop whose one cancel arrives as that outcome does (on a busy loop, one iteration apart)."""
    original = asyncio.open_connection

    def cancel() -> None:
        if landing:
            asyncio.get_running_loop().call_soon(landing.pop().cancel)

    async def open_connection(*args: Any, **kwargs: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            reader, writer = await original(*args, **kwargs)
        except OSError:
            cancel()
            raise
        read = reader.read

        async def read_then_cancel(n: int = -1) -> bytes:
            data = await read(n)
            if data:
                cancel()
            return data

        reader.read = read_then_cancel  # type: ignore[method-assign]
        return reader, writer

    monkeypatch.setattr(asyncio, "open_connection", open_connection)


@pytest.mark.parametrize("master_gone", [False, True], ids=["as-a-frame-arrives", "as-a-connect-is-refused"])
async def test_a_slave_whose_stop_lands_as_a_read_or_a_connect_completes_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master_gone: bool
) -> None:
    """A stop's one cancellation that lands as a read of the master's frames completes, or (the master
    gone: the slave tries to connect every second) as a connect is refused, ends the replication task.
    Python 3.11's ``wait_for`` returned the data, or raised the refusal, and dropped the cancel: the
    session read on (the master's heartbeats kept it alive), or the loop tried again a second later,
    for ever, and the broker's stop waited for it."""
    landing: list[asyncio.Task[None]] = []
    cancel_on_read_or_refusal(monkeypatch, landing)
    async with master_and_slave(tmp_path) as g:
        ha_slave = g.slave.ha_slave
        assert ha_slave is not None
        await wait_until(lambda: ha_slave.connected)
        if master_gone:
            await g.master.stop()
            await wait_until(lambda: not ha_slave.connected)
        landing.append(ha_slave._tasks[0])
        await wait_until(lambda: not landing)  # the cancel was handed over
        done, _ = await asyncio.wait([ha_slave._tasks[0]], timeout=10)
        assert done, "the replication task outlived its cancellation"


async def test_a_slave_takes_a_commit_of_an_existing_group_for_a_topic_it_has_not_synced(
    group: Group,
) -> None:
    """A client that found no master commits to the slave, maybe for a topic made seconds before the
    master went (the slave takes topics at its next metadata sync): taken for a group it knows; a group
    it does not know, or a name no topic may have, is refused as on a master."""
    g = group
    g.slave.groups.find("SG")  # (created on use, as a heartbeat does)
    slave = g.on(g.slave)
    assert g.slave.topics.get("Young") is None
    commit = {"consumerGroup": "SG", "topic": "Young", "queueId": "0", "commitOffset": "3"}
    assert (await slave.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
    assert g.slave.offsets.query_offset("SG", "Young", 0) == 3
    assert g.slave.slave_commits[("SG", "Young", 0)] == 3
    unknown = {**commit, "consumerGroup": "NoSuchGroupHere"}
    # (from this machine a new group is taken on a master's topic; on a topic the slave lacks it is not)
    assert (
        await slave.call(RequestCode.UPDATE_CONSUMER_OFFSET, unknown)
    ).code == ResponseCode.TOPIC_NOT_EXIST
    bad = {**commit, "topic": "no spaces allowed"}
    assert (await slave.call(RequestCode.UPDATE_CONSUMER_OFFSET, bad)).code == ResponseCode.TOPIC_NOT_EXIST
    # on the master such a topic is refused whatever the group
    master = g.on(g.master)
    assert (
        await master.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)
    ).code == ResponseCode.TOPIC_NOT_EXIST
