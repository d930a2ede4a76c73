"""Registration with a real NameServer: at start, on topic changes, retry topics, unregister at stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import daemon.broker.broker as broker_module
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.remoting.bodies import ClusterInfo, PermName, RegisterBrokerBody, TableText, TopicRouteData
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store import fastjson
from store.clock import SystemClock
from store.config_files import TopicConfigFile
from store.models import TopicConfig
from store.names import TRANS_HALF_TOPIC
from tests.support.broker import BrokerHandle, ClusterHandle, start_cluster, stop_cluster
from tests.support.namesrv import count_decodes
from tests.support.turns import LoopTurns


async def route(cluster: ClusterHandle, topic: str) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return await cluster.client.invoke(cluster.namesrv_addr, request)


async def test_start_registers_system_topics(cluster: ClusterHandle) -> None:
    r = await route(cluster, "TBW102")
    assert r.code == ResponseCode.SUCCESS
    data = TopicRouteData.loads(r.body)
    assert data.broker_datas[0].broker_addrs[0] == cluster.addr
    assert data.queue_datas[0].perm == 7 and data.queue_datas[0].write_queue_nums == 8


async def test_a_master_has_the_transaction_half_topic_from_the_start(cluster: ClusterHandle) -> None:
    data = TopicRouteData.loads((await route(cluster, TRANS_HALF_TOPIC)).body)
    assert (data.queue_datas[0].read_queue_nums, data.queue_datas[0].perm) == (1, PermName.READ_WRITE)
    assert cluster.broker.topics.is_system_topic(TRANS_HALF_TOPIC)


async def test_created_topic_has_a_route_when_the_request_returns(cluster: ClusterHandle) -> None:
    header = CreateTopicRequestHeader("Routed", "TBW102", 3, 3, 6, "SINGLE_TAG").to_ext_fields()
    assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
    data = TopicRouteData.loads((await route(cluster, "Routed")).body)
    assert data.queue_datas[0].read_queue_nums == 3


async def test_heartbeat_gives_the_retry_topic_a_route(cluster: ClusterHandle) -> None:
    await cluster.heartbeat("c1", "RouteG", ["T"])
    await cluster.broker.register_all()  # the heartbeat scheduled one; make sure it has happened
    assert (await route(cluster, "%RETRY%RouteG")).code == ResponseCode.SUCCESS


async def test_auto_created_topic_is_registered(cluster: ClusterHandle) -> None:
    assert (await cluster.send("Fresh", b"x")).code == ResponseCode.SUCCESS
    await cluster.broker.register_all()
    assert (await route(cluster, "Fresh")).code == ResponseCode.SUCCESS


async def test_stop_unregisters(tmp_path: Path) -> None:
    handle = await start_cluster(tmp_path)
    try:
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        before = ClusterInfo.loads((await handle.client.invoke(handle.namesrv_addr, request)).body)
        assert "broker-a" in before.broker_addr_table
        await handle.broker.stop()
        request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        after = ClusterInfo.loads((await handle.client.invoke(handle.namesrv_addr, request)).body)
        assert "broker-a" not in after.broker_addr_table
    finally:
        await stop_cluster(handle)


async def test_concurrent_creations_are_each_on_disk_and_routed_when_answered(cluster: ClusterHandle) -> None:
    """Creations group-commit topics.json's journal and the registration; none is answered before both
    hold it (what a load after a crash reads, journal replayed, has it)."""
    names = [f"Burst{i}" for i in range(40)]

    async def create(name: str) -> None:
        header = CreateTopicRequestHeader(name, "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
        assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
        on_disk = TopicConfigFile(cluster.broker.topics.file.path, SystemClock(), read_only=True)
        on_disk.load()
        assert name in on_disk.table
        assert (await route(cluster, name)).code == ResponseCode.SUCCESS

    await asyncio.gather(*(create(n) for n in names))


async def test_a_creation_registers_its_topic_alone_and_the_whole_table_is_read_again_only_after_a_new_connection(
    cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One creation costs O(1) on the NameServer, and the next whole table, at the version that topic
    brought, is not parsed there (with 10,000 topics a megabyte every 30 s); but a NameServer that took a
    topic over a new connection (restarted meanwhile: it learned that topic alone) gets the whole table
    at a new version, which it reads, although no topic changed since."""
    decoded = count_decodes(monkeypatch)
    broker = cluster.broker
    before = broker.topics.file.data_version.counter

    async def create(name: str) -> None:
        header = CreateTopicRequestHeader(name, "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
        assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
        assert (await route(cluster, name)).code == ResponseCode.SUCCESS

    await create("Alone")
    assert len(decoded) == 1  # the topic alone
    await broker.register_all()
    assert broker.topics.file.data_version.counter == before + 1  # the creation's
    assert len(decoded) == 1  # the whole table at the version the NameServer holds: not parsed

    link = broker.client.open_connection(cluster.namesrv_addr)
    assert link is not None
    link.close()  # as a NameServer restart does: it forgets the broker
    for _ in range(100):
        if (await route(cluster, "TBW102")).code != ResponseCode.SUCCESS:
            break
        await asyncio.sleep(0.01)
    await create("Again")  # over a new connection: the NameServer holds it alone
    assert (await route(cluster, "TBW102")).code == ResponseCode.TOPIC_NOT_EXIST
    await broker.register_all()
    assert (await route(cluster, "TBW102")).code == ResponseCode.SUCCESS
    assert broker.topics.file.data_version.counter == before + 3  # the creation, then the re-read
    await broker.register_all()  # nothing registered alone since: the version stays
    assert broker.topics.file.data_version.counter == before + 3


async def test_the_whole_table_is_encoded_again_only_when_it_changed(
    cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 10,000 topics the encoding takes ~100 ms: the periodic registration resends the last body."""
    encoded: list[bool] = []
    encode_parts = RegisterBrokerBody.encode_parts

    def counted(
        self: RegisterBrokerBody, compressed: bool = False, per_part: int = 100, kept: TableText | None = None
    ) -> Iterator[bytes]:
        encoded.append(compressed)
        return encode_parts(self, compressed, per_part, kept)

    checksummed: list[int] = []
    crc32 = broker_module._crc32

    def counted_crc(body: bytes) -> int:
        checksummed.append(len(body))
        return crc32(body)

    monkeypatch.setattr(RegisterBrokerBody, "encode_parts", counted)
    monkeypatch.setattr(broker_module, "_crc32", counted_crc)
    broker = cluster.broker
    await broker.register_all()
    await broker.register_all()
    assert len(encoded) <= 1  # (none when the registration at start-up made the current body)
    header = CreateTopicRequestHeader("Again", "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
    assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
    encoded.clear()  # (the creation registered its topic alone)
    checksummed.clear()
    await broker.register_all()
    await broker.register_all()
    assert encoded == [False]
    assert len(checksummed) == 1  # its checksum too, a megabyte and more with 10,000 topics
    broker.config.compressed_register = True
    await broker.register_all()
    assert encoded == [False, True]
    assert (await route(cluster, "Again")).code == ResponseCode.SUCCESS


async def test_a_broker_permission_update_reaches_every_route(cluster: ClusterHandle) -> None:
    """The permission caps every topic's: NameServers take a table again only at a new data version."""
    assert TopicRouteData.loads((await route(cluster, "TBW102")).body).queue_datas[0].perm & PermName.WRITE
    update = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
    assert (await cluster.client.invoke(cluster.addr, update)).code == ResponseCode.SUCCESS
    await cluster.broker.register_all()  # (the one the update scheduled may not have run yet)
    assert TopicRouteData.loads((await route(cluster, "TBW102")).body).queue_datas[0].perm == PermName.READ


async def test_a_single_topic_registration_waits_for_an_older_whole_table_one(
    cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else the whole table, snapshotted before the update but sent after it (its encoding lets the loop
    serve requests meanwhile), brings back the topic's old route until the next periodic registration."""
    header = CreateTopicRequestHeader("Late", "TBW102", 3, 3, 6, "SINGLE_TAG")
    assert (
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
    ).code == ResponseCode.SUCCESS
    encode = broker_module.encode_sliced
    encoding = asyncio.Event()

    async def slow(body: RegisterBrokerBody, compressed: bool, kept: TableText | None = None) -> bytes:
        encoding.set()
        await asyncio.sleep(0.5)
        return await encode(body, compressed, kept)

    monkeypatch.setattr(broker_module, "encode_sliced", slow)
    cluster.broker.topics.new_version()  # (the last whole-table body is not sent again as it is)
    whole = asyncio.create_task(cluster.broker.register_all())
    await asyncio.wait_for(encoding.wait(), 10)
    header.read_queue_nums = header.write_queue_nums = 8
    assert (
        await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields())
    ).code == ResponseCode.SUCCESS
    await whole
    assert TopicRouteData.loads((await route(cluster, "Late")).body).queue_datas[0].write_queue_nums == 8


async def test_the_whole_table_is_encoded_on_the_loop_in_slices_serving_requests_between_them(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = broker.broker
    for i in range(1000):
        b.topics.put(TopicConfig(f"Many{i}", 1, 1), persist=False)
    turns = LoopTurns()
    encoded: list[tuple[int, int]] = []  # (thread, turn of the other task) of each piece of the body
    encode_parts = RegisterBrokerBody.encode_parts

    def spied(
        self: RegisterBrokerBody, compressed: bool = False, per_part: int = 100, kept: TableText | None = None
    ) -> Iterator[bytes]:
        for part in encode_parts(self, compressed, per_part, kept):
            encoded.append((threading.get_ident(), turns.count))
            yield part

    monkeypatch.setattr(RegisterBrokerBody, "encode_parts", spied)
    for compressed in (False, True):
        async with turns:
            before = turns.count
            body = await b._registration_body(None, compressed)
        pieces = list(encoded)
        assert turns.count - before >= 1000 // broker_module.REGISTER_SLICE  # the loop ran other work between
        assert body == RegisterBrokerBody(b.registration_wrapper(), []).encode(compressed)
        if not compressed:
            on_loop = [turn for thread, turn in pieces if thread == threading.get_ident()]
            assert len(on_loop) == len(pieces) >= 1000 // broker_module.REGISTER_SLICE  # JSON on the loop
            assert len(set(on_loop)) == len(on_loop)  # one piece between two turns of the other task


async def test_without_force_register_an_unchanged_table_is_not_sent_again(tmp_path: Path) -> None:
    """forceRegister=false: the periodic registration asks each NameServer for the table's version
    (which keeps the broker alive there) and sends the table only when one lacks it, as 4.9.8's
    needRegister; the default (forceRegister=true) sends it every period."""
    cluster = await start_cluster(tmp_path, force_register=False)
    try:
        broker, routes = cluster.broker, cluster.namesrv.routes
        await broker.register_all()
        live = routes.broker_live_table[broker.addr]
        live.last_update_ms = 0
        assert await broker.periodic_registration() is False
        assert routes.broker_live_table[broker.addr].last_update_ms > 0  # the query refreshed it
        del routes.broker_live_table[broker.addr]  # a NameServer restarted: it holds no version
        assert await broker.periodic_registration() is True
        assert broker.addr in routes.broker_live_table
        assert await broker.periodic_registration() is False
        header = CreateTopicRequestHeader("Later", "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
        assert (await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
        assert await broker.periodic_registration() is True  # registered alone since: the whole table
        assert await broker.periodic_registration() is False
        broker.config.broker_permission = PermName.READ  # not in the version: the body changed
        assert await broker.periodic_registration() is True
        broker.config.force_register = True
        assert await broker.periodic_registration() is True
    finally:
        await stop_cluster(cluster)


async def test_after_a_topic_changed_the_whole_table_re_encodes_that_topic_alone(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries are replaced, never changed in place: the body's text of every other topic is kept from the
    last encoding (with 10,000 topics re-encoding them all took tens of ms of the loop after each change)."""
    b = broker.broker
    for i in range(300):
        b.topics.put(TopicConfig(f"Many{i:03d}", 1, 1), persist=False)
    first = await b._registration_body(None, False)
    dumped: list[str] = []
    dumps = fastjson.dumps

    def spied(obj: Any, **kwargs: Any) -> bytes:
        if isinstance(obj, dict):
            dumped.extend(name for name, value in obj.items() if isinstance(value, TopicConfig))
        return dumps(obj, **kwargs)

    monkeypatch.setattr(fastjson, "dumps", spied)
    b.topics.put(TopicConfig("Many007", 2, 2), persist=False)
    b.topics.put(TopicConfig("Added", 1, 1), persist=False)
    assert b.topics.delete("Many009")
    body = await b._registration_body(None, False)
    assert sorted(dumped) == ["Added", "Many007"]
    monkeypatch.undo()
    assert body == RegisterBrokerBody(b.registration_wrapper(), []).encode() != first
