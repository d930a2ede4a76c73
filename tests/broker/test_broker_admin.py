"""Admin requests, metrics and restart persistence against a real broker."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.request
from pathlib import Path

from daemon.broker.bodies import (
    ConsumerConnection,
    ConsumerData,
    ConsumeStats,
    HeartbeatData,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicStatsTable,
)
from daemon.broker.broker import Broker
from daemon.broker.config import load_broker_config
from daemon.broker.headers import CreateTopicRequestHeader
from daemon.config import parse_properties, property_line
from daemon.remoting.bodies import KVTable, TopicConfigSerializeWrapper
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.cleanup import FakeDiskUsage
from store.engine import DefaultMessageStore
from store.record import decode_records
from tests.support.broker import BrokerHandle, broker_config, start_broker
from tests.support.waiting import wait_until


def create_topic(name: str, queues: int = 4, perm: int = 6) -> dict[str, str]:
    return CreateTopicRequestHeader(name, "TBW102", queues, queues, perm, "SINGLE_TAG").to_ext_fields()


async def test_create_list_and_delete_topic(broker: BrokerHandle) -> None:
    assert (
        await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic("Adm", 3))
    ).code == ResponseCode.SUCCESS
    all_topics = TopicConfigSerializeWrapper.loads((await broker.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
    assert all_topics.topic_config_table["Adm"].write_queue_nums == 3
    assert (
        "SCHEDULE_TOPIC_XXXX" in all_topics.topic_config_table and "TBW102" in all_topics.topic_config_table
    )
    system = await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic("TBW102"))
    assert system.code == ResponseCode.SYSTEM_ERROR and "conflict with system topic" in (system.remark or "")
    odd = CreateTopicRequestHeader("Odd", "TBW102", 1, 1, 6, "FOO").to_ext_fields()
    refused = await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, odd)  # as 4.9.8's header check
    assert refused.code == ResponseCode.SYSTEM_ERROR and "topicFilterType = [FOO]" in (refused.remark or "")
    assert broker.broker.topics.get("Odd") is None
    assert (
        await broker.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Adm"})
    ).code == ResponseCode.SUCCESS
    assert broker.broker.topics.get("Adm") is None
    assert broker.broker.store.get_max_offset("Adm", 0) == 0  # its consume queues are gone
    await broker.send("Orphan", b"x")
    broker.broker.topics.file.delete("Orphan")  # a config gone without DELETE_TOPIC (e.g. edited file)
    assert (await broker.call(RequestCode.CLEAN_UNUSED_TOPIC)).code == ResponseCode.SUCCESS
    assert ("Orphan", 0) not in broker.broker.store.topic_queue_table()
    again = await broker.send("Adm", b"new", group="PG")  # auto-created again, from offset 0
    assert again.code == ResponseCode.SUCCESS and again.ext_fields["queueOffset"] == "0"


async def test_topic_attributes_as_5x_mqadmin_sets_them(broker: BrokerHandle) -> None:
    """UPDATE_AND_CREATE_TOPIC's ``attributes`` (5.x ``updateTopic -a``): added at creation, changed or
    removed later as 5.x's ``AttributeUtil`` does, refused with 5.x's remark when malformed, unknown or
    not served here; GET_ALL_TOPIC_CONFIG carries them, which 4.9.8's readers ignore."""

    def create(name: str, attributes: str | None) -> dict[str, str]:
        return CreateTopicRequestHeader(
            name, "TBW102", 2, 2, 6, "SINGLE_TAG", attributes=attributes
        ).to_ext_fields()

    async def answer(name: str, attributes: str | None) -> RemotingCommand:
        return await broker.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create(name, attributes))

    topics = broker.broker.topics
    assert (await answer("Timed", "+message.type=DELAY")).code == ResponseCode.SUCCESS
    assert topics.get("Timed").attributes == {"message.type": "DELAY"}  # type: ignore[union-attr]
    # a re-creation without the field (a 4.9.8 tool changing the queues) keeps them
    assert (await answer("Timed", None)).code == ResponseCode.SUCCESS
    assert topics.get("Timed").message_type == "DELAY"  # type: ignore[union-attr]
    assert (await answer("Timed", "+message.type=TRANSACTION")).code == ResponseCode.SUCCESS
    assert topics.get("Timed").message_type == "TRANSACTION"  # type: ignore[union-attr]
    assert (await answer("Timed", "-message.type")).code == ResponseCode.SUCCESS
    assert topics.get("Timed").attributes == {}  # type: ignore[union-attr]
    assert topics.get("Timed").message_type == "NORMAL"  # type: ignore[union-attr]
    refusals = {
        "+message.type=SOMETIMES": "value is not in set",
        "+message.type=MIXED": "MIXED message type is not supported.",
        "-message.type": "only add attribute is supported while creating topic",
        "+color=red": "unsupported key: color",
        "message.type=FIFO": "add/alter attribute format is wrong",
        "+queue.type=BatchCQ": "not supported by this broker",
    }
    for text, remark in refusals.items():
        refused = await answer("Refused", text)
        assert refused.code != ResponseCode.SUCCESS and remark in (refused.remark or ""), (
            text,
            refused.remark,
        )
    assert topics.get("Refused") is None
    assert (await answer("Fifo", "+message.type=FIFO,+reserve.time=86400")).code == ResponseCode.SUCCESS
    table = TopicConfigSerializeWrapper.loads((await broker.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
    assert table.topic_config_table["Fifo"].attributes == {"message.type": "FIFO", "reserve.time": "86400"}
    assert table.topic_config_table["Timed"].extra == {}  # (none left: none written)


async def test_subscription_group_admin(broker: BrokerHandle) -> None:
    body = SubscriptionGroupConfig("SG", retry_max_times=3, consume_enable=False).dumps()
    assert (
        await broker.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    ).code == ResponseCode.SUCCESS
    groups = SubscriptionGroupWrapper.loads(
        (await broker.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).body
    )
    assert groups.subscription_group_table["SG"].retry_max_times == 3
    assert "TOOLS_CONSUMER" in groups.subscription_group_table
    await broker.send("SGT", b"x")
    denied = await broker.pull("SG", "SGT", 0, 0)
    assert denied.code == ResponseCode.NO_PERMISSION
    broker.broker.offsets.commit_offset("SG", "SGT", 0, 1)
    r = await broker.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "SG", "removeOffset": "true"})
    assert r.code == ResponseCode.SUCCESS
    assert (
        broker.broker.groups.table.get("SG") is None
        and broker.broker.offsets.query_offset("SG", "SGT", 0) == -1
    )


async def test_a_heartbeat_naming_many_new_groups_writes_the_group_table_once_for_them(
    tmp_path: Path,
) -> None:
    """Each group a heartbeat created on use rewrote the whole subscriptionGroup.json: one heartbeat
    naming N new groups cost N whole-file writes on the broker's loop, O(N^2), while it served nobody
    else. They are written together now, and kept across a restart."""
    root = tmp_path / "store"
    b = await start_broker(root)
    client = RemotingClient()
    handle = BrokerHandle(b.addr, client, b)
    names = [f"Many{i}" for i in range(200)]
    try:
        file = b.groups.file
        writes: list[int] = []
        persist = file.persist

        def counted() -> None:
            writes.append(1)
            persist()

        file.persist = counted  # type: ignore[method-assign]
        data = HeartbeatData("many@1", [], [ConsumerData(n) for n in names])
        assert (await handle.call(RequestCode.HEART_BEAT, body=data.dumps())).code == ResponseCode.SUCCESS
        assert all(b.groups.get(n) is not None for n in names)
        on_disk = root / "config" / "subscriptionGroup.json"
        await wait_until(lambda: "Many199" in on_disk.read_text())
        assert 1 <= len(writes) <= 2, len(writes)
        late = await handle.heartbeat("late@1", "Late", ["T"])  # written at stop at the latest
        assert late.code == ResponseCode.SUCCESS
    finally:
        await client.close()
        await b.stop()
    kept = SubscriptionGroupWrapper.loads(on_disk.read_bytes())
    assert {*names, "Late"} <= set(kept.subscription_group_table)


async def test_topic_and_consume_stats_show_lag(broker: BrokerHandle) -> None:
    for i in range(5):
        await broker.send("ST", f"{i}".encode(), queue_id=i % 2)
    stats = TopicStatsTable.loads((await broker.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "ST"})).body)
    assert sorted((mq.queue_id, o.max_offset) for mq, o in stats.offset_table.items()) == [
        (0, 3),
        (1, 2),
        (2, 0),
        (3, 0),
    ]
    missing = await broker.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "none"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    broker.broker.offsets.commit_offset("SC", "ST", 0, 3)
    broker.broker.offsets.commit_offset("SC", "ST", 1, 1)
    cs = ConsumeStats.loads((await broker.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "SC"})).body)
    assert cs.total_diff() == 1
    broker.broker.offsets.commit_offset("SC", "ST", 1, 2)
    cs = ConsumeStats.loads(
        (await broker.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "SC", "topic": "ST"})).body
    )
    assert cs.total_diff() == 0


async def test_consumer_connection_and_reset_offset_commits(broker: BrokerHandle) -> None:
    for i in range(4):
        await broker.send("RO", f"{i}".encode())
    offline = await broker.call(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "RO", "group": "RG", "timestamp": "0", "isForce": "true"},
    )
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    await broker.heartbeat("rc1", "RG", ["RO"])
    conn = ConsumerConnection.loads(
        (await broker.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "RG"})).body
    )
    assert [c.client_id for c in conn.connection_set] == ["rc1"] and "RO" in conn.subscription_table
    for qid in range(4):
        broker.broker.offsets.commit_offset("RG", "RO", qid, broker.broker.store.get_max_offset("RO", qid))
    r = await broker.call(
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "RO", "group": "RG", "timestamp": "0", "isForce": "true"},
    )
    assert r.code == ResponseCode.SUCCESS
    assert set(ResetOffsetBody.loads(r.body).offset_table.values()) == {0}
    assert broker.broker.offsets.query_offset("RG", "RO", 0) == 0  # committed by the broker itself


async def test_runtime_info_and_broker_config(broker: BrokerHandle) -> None:
    await broker.send("RT", b"x")
    info = KVTable.loads((await broker.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body).table
    assert info["brokerVersionDesc"] == "V4_9_8" and len(info["putTps"].split()) == 3
    assert int(info["msgPutTotalTodayNow"]) >= 1
    got = await broker.call(RequestCode.GET_BROKER_CONFIG)
    props = parse_properties(got.body.decode())
    assert props["brokerName"] == "broker-a" and "version" in got.ext_fields
    update = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"autoCreateSubscriptionGroup=false\n")
    assert (
        update.code == ResponseCode.SUCCESS and broker.broker.config.auto_create_subscription_group is False
    )
    black = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerConfigPath=/tmp/x\n")
    assert black.code == ResponseCode.NO_PERMISSION


async def test_config_updates_are_written_to_the_store_config_and_read_by_the_next_start(
    broker: BrokerHandle,
) -> None:
    update = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=24\nnoSuchKey=1\n")
    assert update.code == ResponseCode.SUCCESS
    saved = Path(broker.broker.config.store_path_root_dir) / "config" / "broker.properties"
    assert parse_properties(saved.read_text()) == {"fileReservedTime": "24"}
    again = load_broker_config(None, {"store_path_root_dir": broker.broker.config.store_path_root_dir})
    assert again.file_reserved_time == 24 and again.config_path == str(saved)


async def test_a_config_update_the_next_start_would_refuse_is_refused_now(broker: BrokerHandle) -> None:
    """schedSliceMicros applies at start, which refuses a value outside the kernel's bounds: written to the
    file, it would keep the broker from starting again."""
    update = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"schedSliceMicros=5\n")
    assert update.code == ResponseCode.SYSTEM_ERROR and "schedSliceMicros" in (update.remark or "")
    saved = Path(broker.broker.config.store_path_root_dir) / "config" / "broker.properties"
    assert not saved.exists() and broker.broker.config.sched_slice_micros == 0


async def test_a_disk_ratio_update_is_used_clamped_as_4_9_8_uses_it(broker: BrokerHandle) -> None:
    update = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"diskMaxUsedSpaceRatio=150\n")
    assert update.code == ResponseCode.SUCCESS
    assert broker.broker.config.disk_max_used_space_ratio == 95
    assert broker.broker.store.config.disk_max_used_space_ratio == 95


async def test_config_updates_keep_the_operators_file_as_written(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("# our cluster\nbrokerClusterName = Prod\nfileReservedTime=72\n")
    config = load_broker_config(conf, {"store_path_root_dir": str(tmp_path / "store")})
    broker = Broker(
        dataclasses.replace(broker_config(tmp_path / "store"), broker_config_path=config.broker_config_path)
    )
    await broker.start()
    try:
        async with RemotingClient() as client:
            request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=12\n")
            assert (await client.invoke(broker.addr, request)).code == ResponseCode.SUCCESS
    finally:
        await broker.stop()
    assert conf.read_text() == "# our cluster\nbrokerClusterName = Prod\nfileReservedTime=12\n"
    assert not (tmp_path / "store" / "config" / "broker.properties").exists()


async def test_config_update_with_escapes_reads_back_equal_everywhere(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    kept = "# caf\\u00e9\nbrokerClusterName = Prod\nmsgTraceTopicName=a\\\\\\\n   b\n"
    conf.write_text(kept)
    config = load_broker_config(conf, {"store_path_root_dir": str(tmp_path / "store")})
    assert config.msg_trace_topic_name == "a\\b"  # an odd backslash run continues the line
    value = " Trace:é\\#1"
    broker = Broker(
        dataclasses.replace(broker_config(tmp_path / "store"), broker_config_path=config.broker_config_path)
    )
    await broker.start()
    try:
        async with RemotingClient() as client:
            body = (property_line("msgTraceTopicName", value) + "\n").encode()
            request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body)
            assert (await client.invoke(broker.addr, request)).code == ResponseCode.SUCCESS
            assert broker.config.msg_trace_topic_name == value
            got = await client.invoke(broker.addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
            assert parse_properties(got.body.decode())["msgTraceTopicName"] == value
    finally:
        await broker.stop()
    assert conf.read_text().startswith("# caf\\u00e9\nbrokerClusterName = Prod\nmsgTraceTopicName=")
    assert (
        load_broker_config(conf, {"store_path_root_dir": str(tmp_path / "store")}).msg_trace_topic_name
        == value
    )


async def test_metrics_endpoint_reports_lag_and_health(broker: BrokerHandle) -> None:
    await broker.send("MT", b"x")
    broker.broker.offsets.commit_offset("MG", "MT", 0, 0)
    port = broker.broker.metrics_port

    def fetch(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.read().decode()

    assert (await asyncio.to_thread(fetch, "/healthz")).strip() == "serving"
    store = broker.broker.store
    assert isinstance(store, DefaultMessageStore)
    store.cleaner.disk_usage = FakeDiskUsage(0.42)  # the disk the watermarks see is the one reported
    text = await asyncio.to_thread(fetch, "/metrics")
    assert 'rocketmq_disk_used_ratio{broker="broker-a",cluster="DefaultCluster"} 0.42' in text
    assert broker.broker.runtime_info()["commitLogDiskRatio"].startswith("0.42")
    assert (
        'rocketmq_consumer_lag{broker="broker-a",cluster="DefaultCluster",group="MG",queue="0",topic="MT"} 1.0'
        in text
    )
    assert (
        'rocketmq_broker_put_messages_total{broker="broker-a",cluster="DefaultCluster",topic="MT"} 1.0'
        in text
    )


async def test_restart_keeps_messages_offsets_topics_and_groups(tmp_path: Path) -> None:
    root = tmp_path / "store"
    b = await start_broker(root)
    client = RemotingClient()
    handle = BrokerHandle(b.addr, client, b)
    try:
        sent = [await handle.send("Persist", f"m{i}".encode()) for i in range(3)]
        assert all(s.code == ResponseCode.SUCCESS for s in sent)
        b.offsets.commit_offset("PG2", "Persist", 0, 2)
        await handle.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create_topic("Kept", 2))
    finally:
        await client.close()
        await b.stop()
    b = await start_broker(root)
    client = RemotingClient()
    handle = BrokerHandle(b.addr, client, b)
    try:
        assert b.topics.get("Kept") is not None and b.topics.get("Persist") is not None
        q = await handle.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "PG2", "topic": "Persist", "queueId": "0"}
        )
        assert q.ext_fields["offset"] == "2"
        msgs = decode_records((await handle.pull("PG2", "Persist", 0, 0)).body)
        assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    finally:
        await client.close()
        await b.stop()


async def test_store_maintenance_requests(broker: BrokerHandle) -> None:
    assert (await broker.call(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)).code == ResponseCode.SUCCESS
    assert (await broker.call(RequestCode.DELETE_EXPIRED_COMMITLOG)).code == ResponseCode.SUCCESS
    assert broker.broker.store.cleaner.manual_runs > 0  # type: ignore[attr-defined]
