"""Replication integrity with real daemons on 127.0.0.1: a slave appends and acknowledges only whole,
checked records; a master streams only to registered slaves; a diverged slave sets its tail aside."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daemon.acl.signature import Signer
from daemon.broker.broker import Broker
from daemon.broker.ha import MasterRecords, SlaveGate, TailUncheckable, common_end, sync_metadata
from daemon.broker.headers import UpdateConsumerOffsetRequestHeader
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import ClusterInfo, KVTable
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import ACL_EXCEPTION
from daemon.remoting.server import RemotingServer
from store.config import SLAVE, SYNC_MASTER
from store.engine import DefaultMessageStore
from store.ha import FRAME_HEADER, REPORT, encode_frame, encode_report, record_spans
from store.message import Message
from store.quarantine import list_quarantines
from store.record import decode_records
from store.replica_tail import diverged_quarantines
from tests.broker.test_damaged_record_kept import flip
from tests.broker.test_ha import SMALL, Group, commitlog_files, master_and_slave, pull_all, start_slave
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, write_acl
from tests.support.broker import BrokerClient, broker_config, replicated, start_broker
from tests.support.cli import RunCli
from tests.support.namesrv import Namesrv, namesrv_config
from tests.support.ports import free_block
from tests.support.stores import small_config
from tests.support.waiting import wait_until
from tests.tls.test_tls import client_context


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


# ---------------------------------------------------------------------- the HA gate


async def test_the_gate_admits_the_registered_slaves_hosts_only() -> None:
    answers: list[set[str] | None] = [None, {"10.0.0.2"}, {"10.0.0.2", "10.0.0.3"}]
    looked = 0

    async def lookup() -> set[str] | None:
        nonlocal looked
        looked += 1
        return answers[min(looked - 1, len(answers) - 1)]

    gate = SlaveGate(lookup, refresh=0.0)
    assert not await gate.admits("10.0.0.2")  # no NameServer answered: nobody
    assert await gate.admits("::ffff:10.0.0.2")  # an IPv4-mapped peer is its IPv4 address
    assert not await gate.admits("10.0.0.9") and looked == 3
    assert await gate.admits("10.0.0.3")
    slow = SlaveGate(lookup, refresh=3600)
    assert not await slow.admits("10.0.0.9") and not await slow.admits("10.0.0.9")
    assert looked == 5  # a flood of strangers is one look-up per refresh period


async def test_the_gate_forgets_a_slave_the_name_servers_no_longer_list() -> None:
    """A slave host admitted once stayed admitted for the master's life: the cache was asked again only
    for strangers, so a slave that unregistered or expired (its address now anyone's) still got in."""
    listed: set[str] = {"10.0.0.2"}

    async def lookup() -> set[str] | None:
        return set(listed)

    gate = SlaveGate(lookup, refresh=0.0)
    assert await gate.admits("10.0.0.2")
    listed.clear()  # the slave is gone from every NameServer
    assert not await gate.admits("10.0.0.2")


async def fake_slave(port: int, stop: asyncio.Event) -> int:
    """A slave that stores nothing: it asks for the master's end, then acknowledges whatever the master
    says it has sent (the frame headers), as a 60-line attacker would. Returns the bytes it received."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = 0
    try:
        writer.write(encode_report(0))
        await writer.drain()
        while not stop.is_set():
            try:
                header = await asyncio.wait_for(reader.readexactly(12), 0.2)
            except TimeoutError:
                continue
            offset, size = FRAME_HEADER.unpack(header)
            got += 12 + size
            await reader.readexactly(size)
            writer.write(encode_report(offset + size))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()
    return got


@pytest.mark.slow
async def test_a_fake_slave_gets_nothing_and_acknowledges_nothing(tmp_path: Path) -> None:
    """An ACL-enabled SYNC_MASTER with no slave registered: a raw socket on its HA port reads nothing
    (it pulled the whole CommitLog, DENY topics included) and its acks answer no send (they made 200 of
    200 SEND_OK)."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    home = tmp_path / "home"
    write_acl(home)
    master = await start_broker(
        tmp_path / "m",
        namesrv_addr=f"127.0.0.1:{namesrv.port}",
        broker_role=SYNC_MASTER,
        acl_enable=True,
        rocketmq_home=str(home),
        **SMALL,
    )
    client = RemotingClient(signer=Signer(ADMIN_AK, ADMIN_SK))
    stop = asyncio.Event()
    try:
        assert master.ha_master is not None
        sender = BrokerClient(master.addr, client)
        assert (await sender.send("Secret", b"before")).code == ResponseCode.SLAVE_NOT_AVAILABLE
        attacker = asyncio.create_task(fake_slave(master.config.ha_listen_port, stop))
        await asyncio.sleep(0.5)
        codes = [(await sender.send("Secret", f"m{i}".encode())).code for i in range(20)]
        assert codes == [ResponseCode.SLAVE_NOT_AVAILABLE] * 20
        stop.set()
        assert await attacker == 0
        assert master.ha_master.refused >= 1 and not master.ha_master.connections
    finally:
        stop.set()
        await client.close()
        await master.stop()
        await namesrv.stop()


@contextlib.asynccontextmanager
async def master_with_a_listed_local_slave(
    tmp_path: Path, **overrides: object
) -> AsyncIterator[tuple[Namesrv, Broker]]:
    """A master whose NameServer lists a (fake) slave of its group at 127.0.0.1: its HA gate admits local
    peers. Yields the NameServer (through the client that registered that slave) and the master."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    master = await start_broker(
        tmp_path / "m", namesrv_addr=f"127.0.0.1:{namesrv.port}", **{**SMALL, **overrides}
    )
    client = RemotingClient()
    try:
        ns = Namesrv(namesrv, client)
        assert (await ns.register({}, broker_addr=LISTED_SLAVE, broker_id=1)).code == ResponseCode.SUCCESS
        yield ns, master
    finally:
        await client.close()
        await master.stop()
        await namesrv.stop()


LISTED_SLAVE = "127.0.0.1:1"


async def ha_session(port: int, host: str | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw HA connection (from loopback address ``host``, when given) that has asked for the master's
    data from offset 0."""
    local = None if host is None else (host, 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=local)
    writer.write(encode_report(0))
    await writer.drain()
    return reader, writer


@pytest.mark.slow
async def test_two_slaves_registering_back_to_back_are_each_admitted_at_their_first_connection(
    tmp_path: Path,
) -> None:
    """The gate trusted its answer for a second: a slave that registered within that second after another
    was admitted was refused once (a warning, and its replication a reconnect delay late)."""
    async with master_with_a_listed_local_slave(tmp_path) as (ns, master):
        ha = master.ha_master
        assert ha is not None
        sessions = []
        try:
            for broker_id, host in enumerate(("127.0.0.2", "127.0.0.3"), 2):
                registered = await ns.register({}, broker_addr=f"{host}:1", broker_id=broker_id)
                assert registered.code == ResponseCode.SUCCESS
                reader, writer = await ha_session(master.config.ha_listen_port, host)
                sessions.append(writer)
                try:
                    frame = await asyncio.wait_for(reader.read(12), 5)
                except ConnectionError:  # the gate aborts the connection
                    frame = b""
                assert len(frame) > 0, f"{host} refused"  # admitted: a heartbeat frame, not a close
            assert (ha.refused, len(ha.connections)) == (0, 2)
        finally:
            for writer in sessions:
                writer.close()


async def test_a_miss_asks_the_name_servers_again_once_not_at_every_connection() -> None:
    """A host missing from the answer is asked for once more (it may have registered since); refused on
    that answer, it is not asked for again until the answer is refreshed, and strangers arriving
    together, or many in a period, share a few look-ups: the NameServers never see one per connection."""
    listed = {"10.0.0.2"}
    looked = 0

    async def lookup() -> set[str] | None:
        nonlocal looked
        looked += 1
        await asyncio.sleep(0.01)
        return set(listed)

    gate = SlaveGate(lookup, refresh=3600)
    assert await gate.admits("10.0.0.2") and looked == 1
    listed.add("10.0.0.3")  # the second slave registers right after the first was admitted
    assert await gate.admits("10.0.0.3") and looked == 2
    assert await gate.admits("10.0.0.2") and await gate.admits("10.0.0.3") and looked == 2
    assert not await gate.admits("10.0.0.9") and looked == 3
    assert not any([await gate.admits("10.0.0.9") for _ in range(20)]) and looked == 3
    strangers = await asyncio.gather(*(gate.admits(f"10.0.1.{i}") for i in range(50)))
    assert not any(strangers) and looked <= 3 + SlaveGate.MISSES_ASKED


@pytest.mark.slow
async def test_a_slave_no_longer_listed_is_refused(tmp_path: Path) -> None:
    """The gate asked the NameServers again only for strangers: a host once listed as a slave stayed
    admitted after its slave unregistered (or expired), for the master's whole life."""
    async with master_with_a_listed_local_slave(tmp_path) as (ns, master):
        reader, writer = await ha_session(master.config.ha_listen_port)
        assert len(await asyncio.wait_for(reader.readexactly(12), 5)) == 12  # admitted: a heartbeat frame
        writer.close()
        fields = {"brokerName": "broker-a", "brokerAddr": LISTED_SLAVE, "clusterName": "DefaultCluster"}
        unregistered = await ns.call(RequestCode.UNREGISTER_BROKER, {**fields, "brokerId": "1"})
        assert unregistered.code == ResponseCode.SUCCESS
        await asyncio.sleep(1.2)  # the gate's answer is a second old
        reader, writer = await ha_session(master.config.ha_listen_port)
        assert await asyncio.wait_for(reader.read(12), 5) == b""  # closed before a byte was sent
        writer.close()


@pytest.mark.slow
async def test_a_heartbeat_interval_of_zero_does_not_flood_the_slave(tmp_path: Path) -> None:
    """haSendHeartbeatInterval=0 (a config value nothing refuses) made an idle master's write loop spin:
    heartbeat frames back to back, a core busy, for as long as a slave stayed connected."""
    async with master_with_a_listed_local_slave(tmp_path, ha_send_heartbeat_interval=0) as (_, master):
        reader, writer = await ha_session(master.config.ha_listen_port)
        frames = 0
        deadline = asyncio.get_running_loop().time() + 1.0
        with contextlib.suppress(TimeoutError):
            while (left := deadline - asyncio.get_running_loop().time()) > 0:
                _, size = FRAME_HEADER.unpack(await asyncio.wait_for(reader.readexactly(12), left))
                await reader.readexactly(size)
                frames += 1
        writer.close()
        assert frames <= 20, f"{frames} frames in a second from an idle master"


@pytest.mark.slow
async def test_a_transfer_batch_size_of_zero_still_replicates(tmp_path: Path) -> None:
    """haTransferBatchSize=0 (or less) made every frame empty: the slave got heartbeats only, never a
    byte, and a SYNC_MASTER's sends all timed out waiting for it."""
    async with master_with_a_listed_local_slave(tmp_path, ha_transfer_batch_size=0) as (_, master):
        async with RemotingClient() as client:
            assert (
                await BrokerClient(master.addr, client).send("T", b"to replicate")
            ).code == ResponseCode.SUCCESS
        reader, writer = await ha_session(master.config.ha_listen_port)
        _, size = FRAME_HEADER.unpack(await asyncio.wait_for(reader.readexactly(12), 5))
        writer.close()
        assert size > 0, "an empty frame where the master's record should come"


# ---------------------------------------------------------------------- the VIP port


@pytest.mark.slow
async def test_the_vip_port_serves_what_the_main_port_does_and_a_slave_syncs_from_it(tmp_path: Path) -> None:
    """4.9.8 opens listenPort - 2 as well, and a 4.9.8 slave syncs topics, offsets and groups there."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    base = free_block(4)  # VIP, -, listen, HA
    master = await start_broker(
        tmp_path / "m", namesrv_addr=ns, listen_port=base + 2, ha_listen_port=base + 3
    )
    closed = await start_broker(tmp_path / "c", listen_port=free_block(4) + 2, vip_listen_enable=False)
    client = RemotingClient()
    try:
        vip = f"127.0.0.1:{base}"
        on_vip = BrokerClient(vip, client)
        assert (await on_vip.send("Vip", b"through the VIP port", queue_id=0)).code == ResponseCode.SUCCESS
        pulled = await BrokerClient(master.addr, client).pull("G", "Vip", 0, 0)
        assert decode_records(pulled.body)[0].body == b"through the VIP port"
        assert ("127.0.0.1", base) in master.server.bound_addresses()  # on listenHost
        # the VIP port follows the main port's TLS mode (permissive by default): a TLS client works too
        async with RemotingClient(ssl=client_context(None)) as tls_client:
            sent = await BrokerClient(vip, tls_client).send("Vip", b"over TLS", queue_id=0)
            assert sent.code == ResponseCode.SUCCESS
        offset = UpdateConsumerOffsetRequestHeader("G", "Vip", 0, 1).to_ext_fields()
        request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, offset)
        assert (await client.invoke(master.addr, request)).code == ResponseCode.SUCCESS
        # what a 4.9.8 slave does every 10 s, from the VIP port
        replica = await start_broker(tmp_path / "s", broker_role=SLAVE, broker_id=1, **SMALL)
        try:
            changed = await sync_metadata(client, vip, replica.store.configs)
            assert {"TopicConfigFile", "ConsumerOffsetManager"} <= set(changed)
            assert replica.topics.get("Vip") is not None
            assert replica.offsets.query_offset("G", "Vip", 0) == 1
        finally:
            await replica.stop()
        # it registers nothing new: the NameServer knows the main port only
        info = ClusterInfo.loads(
            (await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))).body
        )
        assert info.broker_addr_table["broker-a"].broker_addrs == {0: master.addr}
        with pytest.raises(OSError):  # vipListenEnable=false: nothing listens on listenPort - 2
            await asyncio.open_connection("127.0.0.1", closed.config.listen_port - 2)
    finally:
        await client.close()
        await closed.stop()
        await master.stop()
        await namesrv.stop()


# ---------------------------------------------------------------------- divergence


async def bodies_at_every_offset(
    client: BrokerClient, topic: str, queues: int
) -> dict[tuple[int, int], bytes]:
    out = {}
    for q in range(queues):
        for i, body in enumerate(await pull_all(client, topic, q)):
            out[(q, i)] = body
    return out


@pytest.mark.slow
async def test_a_slave_that_ran_as_a_master_sets_its_tail_aside_and_serves_the_masters_records(
    tmp_path: Path, cli: RunCli
) -> None:
    """The slave's store briefly ran as a standalone master (30 records the master never had), then was
    restarted as SLAVE while the master wrote on: it served the 30 foreign records at (queue, offset)
    pairs where the master holds other messages. Now it serves exactly the master's and the 30 are in a
    quarantine that 'broker ha status' and 'store verify' show."""
    async with master_and_slave(tmp_path) as g:
        on_master = g.on(g.master)
        for i in range(100):
            assert (await on_master.send("Div", f"common-{i}".encode() * 20, queue_id=i % 4)).code == 0
        await replicated(g.master, g.slave)
        await g.slave.stop()
        alone = await start_broker(tmp_path / "slave", **SMALL)  # the slave's store, as a master on its own
        for i in range(30):
            r = await g.on(alone).send("Div", f"foreign-{i}".encode() * 20, queue_id=i % 4)
            assert r.code == 0
        await alone.stop()
        for i in range(100):
            assert (await on_master.send("Div", f"later-{i}".encode() * 20, queue_id=i % 4)).code == 0
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        on_slave = g.on(g.slave)
        first = await on_slave.pull("G", "Div", 0, 25, max_nums=32)  # where the foreign records were
        assert not any(m.body.startswith(b"foreign") for m in decode_records(first.body or b""))
        await replicated(g.master, g.slave)
        theirs = await bodies_at_every_offset(on_master, "Div", 4)
        assert len(theirs) == 200
        assert await bodies_at_every_offset(on_slave, "Div", 4) == theirs
        [quarantine] = diverged_quarantines(str(tmp_path / "slave"))
        # (their ConsumeQueue units went when the slave opened past its replica mark: none to copy)
        assert quarantine.records == 30 and quarantine.units == 0
        assert "differs from its master's" in quarantine.why
        info = await g.client.invoke(
            g.slave.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        )
        table = KVTable.loads(info.body).table
        assert table["haDivergedRecords"] == "30" and table["haDivergedQuarantine"] == quarantine.path
        # a record sent now is replicated at the master's offsets
        assert (await on_master.send("Div", b"after", queue_id=0)).code == 0
        await replicated(g.master, g.slave)
        assert (await bodies_at_every_offset(on_slave, "Div", 4))[(0, 50)] == b"after"
        status = await asyncio.to_thread(cli, "broker", "ha", "status", "-n", g.ns_addr, "-o", "json")
        assert status.code == 0, status.stderr
        rows = {row["broker_id"]: row for row in json.loads(status.stdout)}
        assert (rows[1]["diverged_records"], rows[1]["quarantine"]) == (30, quarantine.path)
        await g.slave.stop()
        verify = await asyncio.to_thread(
            cli, "store", "verify", "--store", str(tmp_path / "slave"), "-o", "json"
        )
        [listed] = json.loads(verify.stdout)["quarantined"]
        assert (listed["recovery"], listed["records_set_aside"]) == ("replication", 30)


@pytest.mark.slow
async def test_a_master_restored_from_an_older_disk_is_not_outlived_by_its_slaves_records(
    tmp_path: Path,
) -> None:
    """The master's store goes back to a copy taken 40 records ago: the slave sets those 40 aside instead
    of serving records the master does not have (it was refused as 'beyond the master's end' forever)."""
    port = free_block(4) + 2  # the master comes back where the slave knows it
    fixed: dict[str, Any] = {"listen_port": port, "ha_listen_port": port + 1}
    async with master_and_slave(tmp_path, **fixed) as g:

        async def restart_master() -> None:
            g.master = await start_broker(
                tmp_path / "master", **{**SMALL, "namesrv_addr": g.ns_addr, **fixed}
            )

        for i in range(60):
            assert (await g.on(g.master).send("Old", f"m{i}".encode() * 20, queue_id=0)).code == 0
            if i == 19:
                await g.master.stop()
                shutil.copytree(tmp_path / "master", tmp_path / "master-old")
                await restart_master()
        await replicated(g.master, g.slave)
        await g.master.stop()
        shutil.rmtree(tmp_path / "master")
        shutil.copytree(tmp_path / "master-old", tmp_path / "master")
        await restart_master()
        assert g.master.store.get_max_offset("Old", 0) == 20
        await wait_until(lambda: g.slave.store.max_phy_offset == g.master.store.max_phy_offset)
        assert g.slave.store.get_max_offset("Old", 0) == 20
        [quarantine] = diverged_quarantines(str(tmp_path / "slave"))
        assert quarantine.records == 40
        assert (await g.on(g.master).send("Old", b"new", queue_id=0)).code == 0
        await replicated(g.master, g.slave)
        want = [f"m{i}".encode() * 20 for i in range(20)] + [b"new"]
        assert await pull_all(g.on(g.slave), "Old", 0) == want


# ---------------------------------------------------------------------- a slave serves what it holds


async def test_a_slave_serves_a_replicated_topic_before_any_metadata_sync_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic created on the master after the slave's last metadata sync (the master was down at every
    sync since, in a kill loop): the slave held every byte and answered 'topic not exist'."""

    async def master_down_at_every_sync(self: Broker) -> None:
        pass

    monkeypatch.setattr(Broker, "_metadata_sync_loop", master_down_at_every_sync)
    async with master_and_slave(tmp_path) as g:
        bodies = {q: [f"fresh-{q}-{i}".encode() for i in range(5)] for q in range(4)}
        for i in range(5):
            for q in range(4):
                assert (await g.on(g.master).send("Fresh", bodies[q][i], queue_id=q)).code == 0
        await wait_until(lambda: g.slave.store.get_max_offset("Fresh", 3) == 5)
        await wait_until(lambda: g.slave.topics.get("Fresh") is not None, timeout=5)
        for q in range(4):
            assert await pull_all(g.on(g.slave), "Fresh", q) == bodies[q]
        derived = g.slave.topics.get("Fresh")
        assert derived is not None and derived.read_queue_nums == 4
        await g.slave.sync_from_master()
        assert g.slave.topics.get("Fresh") == g.master.topics.get("Fresh")  # the master's, after a sync


@contextlib.asynccontextmanager
async def synced_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Group]:
    """A master and slave whose metadata syncs run only when the test calls ``sync_from_master``, the
    master holding a topic the slave's first sync has to take."""

    async def master_down_at_every_sync(self: Broker) -> None:
        pass

    monkeypatch.setattr(Broker, "_metadata_sync_loop", master_down_at_every_sync)
    async with master_and_slave(tmp_path) as g:
        await g.on(g.master).create_topic("Before", 1)
        yield g


async def the_rest_of_late_is_derived_and_served(g: Group) -> None:
    """The master's topic "Late" (4 queues) gets a message in queues 1-3 too: the slave's derived config
    grows to them, and it serves all four."""
    for q in range(1, 4):
        assert (await g.on(g.master).send("Late", f"q{q}".encode(), queue_id=q)).code == 0

    def derived() -> int:
        late = g.slave.topics.get("Late")
        return late.read_queue_nums if late is not None else 0

    await wait_until(lambda: derived() == 4, timeout=10, why=lambda: f"derived {derived()} queue(s)")
    for q in range(4):
        assert await pull_all(g.on(g.slave), "Late", q) == [f"q{q}".encode()]


async def test_a_topic_derived_while_a_metadata_sync_is_under_way_stays_derived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slave's sync read the master's topic table before a topic was made there, and the topic's
    first message reached the slave while the sync's other steps ran: the slave derived a config from the
    one queue it held. The sync's end took that config for the master's, so the topic's other queues were
    never served (a SIGKILL of the master right after left a Jepsen run with one queue of four)."""

    async with synced_by_hand(tmp_path, monkeypatch) as g:
        master = g.on(g.master)
        invoke, read, resume = g.slave.client.invoke, asyncio.Event(), asyncio.Event()

        async def held_after_the_topics(addr: str, request: RemotingCommand, *args: Any) -> RemotingCommand:
            if request.code == RequestCode.GET_ALL_CONSUMER_OFFSET:
                read.set()
                await resume.wait()
            return await invoke(addr, request, *args)

        monkeypatch.setattr(g.slave.client, "invoke", held_after_the_topics)
        sync = asyncio.create_task(g.slave.sync_from_master())
        await read.wait()  # the master's topic table is read and taken: "Late" is not in it
        await master.create_topic("Late", 4)
        assert (await master.send("Late", b"q0", queue_id=0)).code == 0
        await wait_until(lambda: g.slave.topics.get("Late") is not None, timeout=10)  # one queue seen
        resume.set()
        assert "TopicConfigFile" in await sync
        await the_rest_of_late_is_derived_and_served(g)


async def test_a_topic_derived_between_the_syncs_topic_request_and_its_answer_stays_derived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master read its topic table before a topic was made there, and the topic's first message
    reached the slave, which derived a config for it, before that answer did: the sync replaced the table
    with the master's, which lacks the topic, so the slave held the topic's messages with no config (not
    served until a sync after the master's next change; never, were the master gone)."""

    async with synced_by_hand(tmp_path, monkeypatch) as g:
        master = g.on(g.master)
        invoke = g.slave.client.invoke

        async def derived_before_the_answer(
            addr: str, request: RemotingCommand, *args: Any
        ) -> RemotingCommand:
            response = await invoke(addr, request, *args)
            if request.code == RequestCode.GET_ALL_TOPIC_CONFIG:  # answered without "Late"; not yet arrived
                await master.create_topic("Late", 4)
                assert (await master.send("Late", b"q0", queue_id=0)).code == 0
                await wait_until(lambda: g.slave.topics.get("Late") is not None, timeout=10)
            return response

        monkeypatch.setattr(g.slave.client, "invoke", derived_before_the_answer)
        assert "TopicConfigFile" in await g.slave.sync_from_master()
        monkeypatch.setattr(g.slave.client, "invoke", invoke)
        late = g.slave.topics.get("Late")
        assert late is not None and late.read_queue_nums == 1, "the derived config was dropped"
        assert await pull_all(g.on(g.slave), "Late", 0) == [b"q0"]
        await the_rest_of_late_is_derived_and_served(g)
        await g.slave.sync_from_master()
        assert g.slave.topics.get("Late") == g.master.topics.get("Late")  # the master's, at the next sync


@pytest.mark.parametrize(
    ("remark", "refused"),
    [
        ("No message at offset", False),  # no record starts there: the slave's copy is not the master's
        (f"{ACL_EXCEPTION}No accessKey is configured, validate(PlainPermissionManager.java:664)", True),
    ],
)
async def test_a_rocketmq_masters_acl_refusal_of_the_tail_check_is_no_missing_record(
    remark: str, refused: bool
) -> None:
    """A RocketMQ 4.9.8 master with ACL on refuses an unsigned VIEW_MESSAGE_BY_ID with SYSTEM_ERROR and its
    AclException, the code that otherwise says no record starts at the offset: read as that, every record
    the check asked of counted as divergent. A refusal leaves the tail unchecked (the slave replicates on,
    with a WARNING), as our master's NO_PERMISSION does."""
    server = RemotingServer(
        host="127.0.0.1",
        default_processor=lambda conn, request: request.make_response(ResponseCode.SYSTEM_ERROR, remark),
    )
    await server.start()
    try:
        async with RemotingClient() as client:
            records = MasterRecords(client, lambda: f"127.0.0.1:{server.port}")
            if refused:
                with pytest.raises(TailUncheckable, match="globalWhiteRemoteAddresses"):
                    await records.at(0)
            else:
                assert await records.at(0) is None
    finally:
        await server.stop()


@pytest.mark.slow
async def test_a_slave_of_an_acl_master_replicates_though_it_cannot_check_its_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The slave holds no credentials: an ACL master refuses its VIEW_MESSAGE_BY_ID, and the slave says it
    replicates unchecked rather than stopping replication."""
    home = tmp_path / "home"
    write_acl(home)
    signer = Signer(ADMIN_AK, ADMIN_SK)
    async with master_and_slave(tmp_path, signer=signer, acl_enable=True, rocketmq_home=str(home)) as g:
        for i in range(10):
            assert (await g.on(g.master).send("Acl", b"%d" % i, queue_id=0)).code == 0
            if i == 4:
                await replicated(g.master, g.slave)
                await g.slave.stop()
                g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await replicated(g.master, g.slave)
        assert "cannot be checked against its master" in caplog.text
        assert "globalWhiteRemoteAddresses, as its metadata sync needs too" in caplog.text  # the way in


@pytest.mark.slow
async def test_a_slave_in_the_acl_masters_whitelist_checks_its_tail_as_it_syncs(tmp_path: Path) -> None:
    """A slave signs nothing (4.9.8's neither): its metadata sync gets through an ACL master only from an
    address in the master's globalWhiteRemoteAddresses, and so does its divergence check. Whitelisted, a
    slave that ran as a master on its own sets its foreign records aside and syncs the master's topics."""
    home = tmp_path / "home"
    write_acl(home, PLAIN_ACL.replace("  - 10.10.103.*\n", "  - 10.10.103.*\n  - 127.0.0.1\n"))
    signer = Signer(ADMIN_AK, ADMIN_SK)
    async with master_and_slave(tmp_path, signer=signer, acl_enable=True, rocketmq_home=str(home)) as g:
        for i in range(20):
            assert (await g.on(g.master).send("Acl", b"common-%d" % i, queue_id=0)).code == 0
        await replicated(g.master, g.slave)
        await g.slave.stop()
        alone = await start_broker(tmp_path / "slave", **SMALL)  # the slave's store, as a master on its own
        for i in range(5):
            assert (await g.on(alone).send("Acl", b"foreign-%d" % i, queue_id=0)).code == 0
        await alone.stop()
        for i in range(10):
            assert (await g.on(g.master).send("Acl", b"later-%d" % i, queue_id=0)).code == 0
        g.slave = await start_slave(tmp_path / "slave", g.ns_addr)
        await replicated(g.master, g.slave)
        [quarantine] = diverged_quarantines(str(tmp_path / "slave"))
        assert quarantine.records == 5
        assert await pull_all(g.on(g.slave), "Acl", 0) == await pull_all(g.on(g.master), "Acl", 0)
        assert g.slave.topics.get("Acl") == g.master.topics.get("Acl")  # the metadata sync got through


_PEER_SCRIPT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(bytes(8))
try:
    print(len(s.recv(65536)))  # the master's first frame, or 0: closed
except ConnectionError:
    print(0)
"""


def peer_reads(ns_name: str, host: str, ha_port: int) -> int:
    """What a raw HA connection from the namespace to ``host:ha_port`` reads (0: closed at once)."""
    argv = ["ip", "netns", "exec", ns_name, sys.executable, "-c", _PEER_SCRIPT, host, str(ha_port)]
    return int(subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout)


@contextlib.contextmanager
def peer_namespace() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair whose addresses exist only on the pair:
    ``(namespace, this side's address, the namespace's address)``. Skips where the machine refuses."""
    tag = f"{os.getpid() % 10000}{random.randrange(1000)}"
    ns, here, there = f"hai{tag}", f"vha{tag}", f"vhb{tag}"
    n = random.randrange(1, 250)
    ours, theirs = f"10.213.{n}.1", f"10.213.{n}.2"
    steps = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", here, "type", "veth", "peer", "name", there],
        ["ip", "link", "set", there, "netns", ns],
        ["ip", "addr", "add", f"{ours}/30", "dev", here],
        ["ip", "link", "set", here, "up"],
        ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{theirs}/30", "dev", there],
        ["ip", "netns", "exec", ns, "ip", "link", "set", there, "up"],
    ]
    try:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode:
                pytest.skip(f"cannot make a network namespace here: {' '.join(step)}: {done.stderr.strip()}")
        yield ns, ours, theirs
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextlib.asynccontextmanager
async def master_on(
    tmp_path: Path, host: str, signer: Signer | None = None, **overrides: Any
) -> AsyncIterator[tuple[Namesrv, Broker, BrokerClient]]:
    """A NameServer on loopback and a master listening on ``host`` that registers there, with a client."""
    namesrv = Namesrv(NamesrvController(namesrv_config(tmp_path)), RemotingClient())
    await namesrv.controller.start()
    master = await start_broker(
        tmp_path / "m", listen_host=host, broker_ip1=host, namesrv_addr=namesrv.addr, **SMALL, **overrides
    )
    client = RemotingClient(signer=signer)
    try:
        yield namesrv, master, BrokerClient(master.addr, client)
    finally:
        await client.close()
        await master.stop()
        await namesrv.client.close()
        await namesrv.controller.stop()


@pytest.mark.slow
async def test_the_gate_matches_the_peers_address_off_loopback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """From a network namespace's own address: refused while the NameServer lists the group's slave on
    another host (loopback), admitted once it lists one at that address. The master (ASYNC, protected
    mode, no haTls) says at start that it streams to whoever the NameServers list."""
    with peer_namespace() as (ns_name, ours, theirs):
        with caplog.at_level(logging.WARNING, logger="daemon.broker.broker"):
            started = master_on(tmp_path, ours)
            namesrv, master, sender = await started.__aenter__()
        try:
            said = [
                r.getMessage()
                for r in caplog.records
                if "streams its CommitLog to any host" in r.getMessage()
            ]
            assert said, [r.getMessage() for r in caplog.records]
            assert (await sender.send("Far", b"x" * 100)).code == 0
            ha = master.config.ha_listen_port
            assert (await namesrv.register({}, broker_addr="127.0.0.1:1", broker_id=1)).code == 0
            assert await asyncio.to_thread(peer_reads, ns_name, ours, ha) == 0
            assert (await namesrv.register({}, broker_addr=f"{theirs}:1", broker_id=2)).code == 0
            await asyncio.sleep(1.1)  # the gate looks its slaves up again at most once a second
            assert await asyncio.to_thread(peer_reads, ns_name, ours, ha) > 0
        finally:
            await started.__aexit__(None, None, None)


@pytest.mark.slow
async def test_an_acl_master_streams_beyond_loopback_only_to_a_whitelisted_slave(tmp_path: Path) -> None:
    """A NameServer with ACL off takes anyone's registration: a stranger listed as a slave of an ACL
    master (its registration accepted) would read every message the ACL keeps from it over the HA port.
    Beyond loopback (without haTls) the master also asks what the slave's metadata sync needs anyway: the
    host in its globalWhiteRemoteAddresses."""
    home = tmp_path / "home"
    acl_file = write_acl(home)
    with peer_namespace() as (ns_name, ours, theirs):
        signer = Signer(ADMIN_AK, ADMIN_SK)
        async with master_on(tmp_path, ours, signer, acl_enable=True, rocketmq_home=str(home)) as (
            namesrv,
            master,
            sender,
        ):
            assert (await sender.send("Secret", b"x" * 100)).code == 0
            ha = master.config.ha_listen_port
            assert (await namesrv.register({}, broker_addr=f"{theirs}:1", broker_id=2)).code == 0
            assert await asyncio.to_thread(peer_reads, ns_name, ours, ha) == 0
            assert master.ha_master is not None and master.ha_master.refused >= 1
            acl_file.write_text(PLAIN_ACL.replace("  - 10.10.103.*\n", f"  - 10.10.103.*\n  - {theirs}\n"))
            await asyncio.sleep(2.2)  # the ACL file is looked at once a second, the slaves too
            assert await asyncio.to_thread(peer_reads, ns_name, ours, ha) > 0


#: From the namespace: an HA "slave" that reports offset 0, then acknowledges every byte it is sent,
#: storing none, for argv[3] seconds.
_ACKING_PEER = """
import socket, struct, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(struct.pack(">q", 0))
until = time.monotonic() + float(sys.argv[3])

def read(n):
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            raise SystemExit(0)
        got += chunk
    return got

while time.monotonic() < until:
    offset, size = struct.unpack(">qi", read(12))
    read(size)
    s.sendall(struct.pack(">q", offset + size))
"""


@pytest.mark.slow
async def test_a_sync_master_in_protected_mode_counts_a_slave_off_the_machine_only_when_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A NameServer with ACL off takes anyone's registration, and the HA gate admits whoever it lists as
    a slave: a peer that registered as one, connected and acknowledged every byte while storing none had
    a SYNC_MASTER answer SEND_OK for data only the master held. In protected mode without haTls the
    master counts the acknowledgements of a slave off its machine only at haWhiteRemoteAddresses, and
    says so at start; the slave is streamed to all the same."""
    with peer_namespace() as (ns_name, ours, theirs):
        for white, expected in (
            ("", ResponseCode.SLAVE_NOT_AVAILABLE),
            (f"{theirs};10.9.9.*", ResponseCode.SUCCESS),
        ):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="daemon.broker.broker"):
                started = master_on(
                    tmp_path / (white or "unlisted"),
                    ours,
                    broker_role=SYNC_MASTER,
                    ha_white_remote_addresses=white,
                )
                namesrv, master, sender = await started.__aenter__()
            try:
                said = [r.getMessage() for r in caplog.records if "SYNC_MASTER counts" in r.getMessage()]
                assert said and (theirs in said[0]) == bool(white), said
                assert (await namesrv.register({}, broker_addr=f"{theirs}:1", broker_id=1)).code == 0
                ha = master.ha_master
                assert ha is not None
                argv = [
                    "ip",
                    "netns",
                    "exec",
                    ns_name,
                    sys.executable,
                    "-c",
                    _ACKING_PEER,
                    ours,
                    str(ha.port),
                    "20",
                ]
                peer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    await wait_until(lambda ha=ha: bool(ha.slaves), timeout=15)
                    answer = await sender.send("Sync", b"x" * 100)
                    assert answer.code == expected, answer.remark
                    assert (ha.push2slave_max_offset > 0) == bool(white)
                finally:
                    peer.kill()
                    peer.wait()
            finally:
                await started.__aexit__(None, None, None)


def test_the_walk_back_finds_the_last_shared_record_across_files(tmp_path: Path) -> None:
    """``common_end`` against a master that holds the same records up to ``shared`` and others (or
    nothing) after it: the end of the last shared record, wherever it is, in a few requests."""
    file_size = 64 * 1024
    with DefaultMessageStore(small_config(tmp_path, mapped_file_size_commit_log=file_size)) as store:
        for i in range(1000):
            assert store.put_message(Message("W", os.urandom(100 + i % 400), queue_id=i % 3)).ok
        end = store.max_phy_offset
        assert end > 5 * file_size
        starts = [s for f in range(0, end, file_size) for s, _n in record_spans(store, f, end)]
        for shared, other in [
            (end, None),  # all shared
            (starts[517], None),  # the master ends there (restored from an older disk)
            (starts[40], b"x"),  # the master holds other records from there on (five files back)
            (starts[-1], b"x"),  # only the last record differs
            (starts[0], b"x"),  # nothing shared
            (file_size, b"x"),  # from the second file's first record on
        ]:
            asked: list[int] = []

            async def master_at(
                offset: int, shared: int = shared, other: bytes | None = other, asked: list[int] = asked
            ) -> bytes | None:
                asked.append(offset)
                if offset < shared:
                    head = store.read_commit_log(offset, 4)
                    assert head is not None
                    return store.read_commit_log(offset, int.from_bytes(head, "big"))
                return other

            assert asyncio.run(common_end(store, master_at)) == shared
            assert len(asked) <= 2 * (end // file_size + 1) + 12  # by file, then a binary search


def test_the_walk_back_passes_records_set_aside_in_place(tmp_path: Path) -> None:
    """A master shows no record where it set one aside in place; the slave holds the same damaged bytes
    there, set aside too. The record after it decides: a binary search that asks about one cuts nothing
    the master holds, and a damaged last record is cut (to be taken again), never kept past the master."""
    file_size = 256 * 1024  # one file: the binary search runs over the damaged run
    config = small_config(tmp_path, mapped_file_size_commit_log=file_size)
    with DefaultMessageStore(config) as store:
        for i in range(300):
            assert store.put_message(Message("W", f"walk-{i:04d}-".encode() * 20, queue_id=0)).ok
        end = store.max_phy_offset
        assert end < file_size
        starts = [s for f in range(0, end, file_size) for s, _n in record_spans(store, f, end)]
        damaged = {starts[-1], *starts[100:240]}
        for at in damaged:
            record = store.look_message_by_offset(at)
            assert record is not None
            mf = store.commit_log.files.find_file(at)
            assert mf is not None
            flip(Path(mf.path), at - mf.file_from_offset + bytes(record.raw).index(record.message.body) + 1)
        for shared, found in [
            (end, starts[-1]),  # the last record: cut, to be taken again
            (starts[250], starts[250]),  # the master holds more than the damaged run
            (starts[175], starts[100]),  # the master ends inside the damaged run: cut where it starts
        ]:

            async def master_at(offset: int, shared: int = shared) -> bytes | None:
                if offset in damaged or offset >= shared:
                    return None
                head = store.read_commit_log(offset, 4)
                assert head is not None
                return store.read_commit_log(offset, int.from_bytes(head, "big"))

            assert asyncio.run(common_end(store, master_at)) == found, shared


async def test_the_master_streams_from_a_mid_record_report_as_4_9_8_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real 4.9.8 slave appends the master's frames raw (``HAClient#dispatchReadRequest``) and reports
    ``getMaxPhyOffset()``, so after a lost connection it reconnects with an offset inside a record: the
    master streams from exactly there, with one WARNING per connection. A report past the master's end is
    still closed, with an ERROR naming both offsets."""
    namesrv = Namesrv(NamesrvController(namesrv_config(tmp_path)), RemotingClient())
    await namesrv.controller.start()
    master = await start_broker(tmp_path / "m", namesrv_addr=namesrv.addr, **SMALL)
    client = RemotingClient()
    try:
        for i in range(3):
            assert (await BrokerClient(master.addr, client).send("B", b"%d" % i * 100, queue_id=0)).code == 0
        assert (await namesrv.register({}, broker_addr="127.0.0.1:1", broker_id=1)).code == 0
        end = master.store.max_phy_offset
        first = master.store.read_commit_log(0, 4)
        assert first is not None
        mid = int.from_bytes(first, "big") // 2  # inside the first record
        port = master.config.ha_listen_port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_report(mid))
        await writer.drain()
        offset, length = FRAME_HEADER.unpack(await asyncio.wait_for(reader.readexactly(12), 10))
        assert (offset, length) == (mid, end - mid)
        assert await asyncio.wait_for(reader.readexactly(length), 10) == master.store.read_commit_log(
            mid, end - mid
        )
        writer.write(encode_report(mid + 1) + encode_report(end))  # acks inside records: no new WARNING
        await writer.drain()
        ha = master.ha_master
        assert ha is not None
        await wait_until(lambda: ha.push2slave_max_offset == end)
        warned = [r for r in caplog.records if "where no record" in r.getMessage()]
        assert len(warned) == 1 and warned[0].levelname == "WARNING"
        assert f"offset {mid}" in warned[0].getMessage()
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(encode_report(end + 7))  # past the master's end: closed
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        [error] = [r for r in caplog.records if r.levelname == "ERROR" and "beyond" in r.getMessage()]
        assert f"{end + 7}" in error.getMessage() and f"{end}" in error.getMessage()
    finally:
        await client.close()
        await master.stop()
        await namesrv.client.close()
        await namesrv.controller.stop()


# ---------------------------------------------------------------------- a damaged record set aside in place


@pytest.mark.slow
async def test_a_record_its_master_set_aside_in_place_is_set_aside_on_the_slave_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cli: RunCli
) -> None:
    """The master's recovery kept a record with a damaged body in its CommitLog, quarantined and never
    served. The slave refused that record (its body CRC fails) and stopped there for good; now it takes
    it byte for byte, sets it aside as recovery does, and replicates on."""
    root = tmp_path / "master"
    recs: list[tuple[int, int, bytes]] = []  # (offset, size, body)
    with DefaultMessageStore(broker_config(root, **SMALL).store_config()) as store:
        for i in range(60):
            body = f"kept-{i:03d}-".encode() * 20
            put = store.put_message(Message("Kept", body, queue_id=i % 2, properties={"KEYS": f"k{i}"}))
            assert put.ok
            recs.append((put.phys_offset, put.wrote_bytes, body))
        raw = store.commit_log.read_record(recs[30][0])
        assert raw is not None
        v_off, v_size, v_body = recs[30]  # queue 0, queue offset 15
        flip(root / "commitlog" / f"{0:020d}", v_off + bytes(raw).index(v_body) + 3)
    async with master_and_slave(tmp_path, broker_role=SYNC_MASTER) as g:
        master_store = g.master.store
        assert isinstance(master_store, DefaultMessageStore)
        assert master_store.commit_log.set_aside == {v_off: v_size}  # recovery set it aside in place
        await replicated(g.master, g.slave)
        assert commitlog_files(g.slave) == commitlog_files(g.master)  # byte for byte, the damaged one too
        on_slave = g.on(g.slave)
        want = {q: [b for i, (_o, _s, b) in enumerate(recs) if i % 2 == q and i != 30] for q in (0, 1)}
        assert {q: await pull_all(on_slave, "Kept", q) for q in (0, 1)} == want
        after = await on_slave.pull("G", "Kept", 0, 15, max_nums=1)  # its unit keeps later offsets right
        assert [m.body for m in decode_records(after.body)] == [recs[32][2]]
        view = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(v_off)})
        assert (await g.client.invoke(g.slave.addr, view)).code != ResponseCode.SUCCESS  # never served
        [quarantine] = [m for m in list_quarantines(str(tmp_path / "slave")) if m.in_place]
        [piece] = quarantine.files
        assert (piece.from_offset, piece.to_offset) == (v_off, v_off + v_size)
        errors = [
            r.getMessage() for r in caplog.records if r.levelname == "ERROR" and r.name.startswith("store")
        ]
        assert any(str(v_off) in e and "set aside" in e for e in errors), errors
        for i in range(5):  # a SYNC_MASTER's sends after it are acknowledged by the slave
            assert (
                await g.on(g.master).send("Kept", b"after-%d" % i, queue_id=0)
            ).code == ResponseCode.SUCCESS
        ha = g.master.ha_master
        assert ha is not None and ha.push2slave_max_offset == g.master.store.max_phy_offset
        await replicated(g.master, g.slave)  # acknowledged is appended; wait for the units too
        await g.slave.stop()
        verify = await asyncio.to_thread(
            cli, "store", "verify", "--store", str(tmp_path / "slave"), "-o", "json"
        )
        assert verify.code == 0, verify.stdout + verify.stderr  # counted, a note, not a problem
        report = verify.json()
        assert report["damaged_set_aside"] == 1 and any(str(v_off) in n for n in report["notes"])
