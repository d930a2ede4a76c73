"""Heartbeats, consumer lists, notifications, offsets and order locks against a real broker."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from daemon.broker.bodies import (
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    ProducerData,
    SubscriptionData,
)
from daemon.broker.managers.consumers import MAX_CLIENT_GROUPS
from daemon.broker.managers.locks import RebalanceLockManager
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.limits import MAX_JSON_BODY
from store import fastjson
from store.config_files import ConsumerOffsetManager
from store.record import decode_records
from tests.support.broker import BrokerHandle, start_broker
from tests.support.waiting import wait_until


async def test_heartbeat_registers_consumer_and_creates_retry_topic(broker: BrokerHandle) -> None:
    assert (await broker.heartbeat("10.0.0.1@1", "CG", ["T"])).code == ResponseCode.SUCCESS
    assert broker.broker.topics.get("%RETRY%CG") is not None
    r = await broker.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG"})
    assert GetConsumerListByGroupResponseBody.loads(r.body).consumer_id_list == ["10.0.0.1@1"]
    none = await broker.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "Other"})
    assert none.code == ResponseCode.SYSTEM_ERROR and "no consumer for this group" in (none.remark or "")


async def test_ali_ons_style_heartbeat_without_expression_type(broker: BrokerHandle) -> None:
    body = (
        b'{"clientID":"1.2.3.4@99","consumerDataSet":[{"groupName":"AG","consumeType":"CONSUME_PASSIVELY",'
        b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":'
        b'[{"topic":"T","subString":"*","classFilterMode":false,"tagsSet":[],"codeSet":[],"subVersion":1}],'
        b'"unitMode":false}],"producerDataSet":[]}'
    )
    assert (await broker.call(RequestCode.HEART_BEAT, body=body)).code == ResponseCode.SUCCESS
    info = broker.broker.consumers.get("AG")
    assert info is not None and "T" in info.subscriptions


async def test_membership_change_notifies_members_and_close_removes_them(broker: BrokerHandle) -> None:
    notified: list[str] = []

    def on_notify(conn: Connection, request: RemotingCommand) -> None:
        notified.append(request.ext_fields["consumerGroup"])

    other = RemotingClient({RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify})
    try:
        data = HeartbeatData("c2", [], [ConsumerData("NG")])
        first = await other.invoke(
            broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=data.dumps())
        )
        assert first.code == ResponseCode.SUCCESS
        await broker.heartbeat("c1", "NG", [])
        while len(notified) < 2:
            await asyncio.sleep(0.01)
        assert set(notified) == {"NG"}
        ids = await broker.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "NG"})
        assert sorted(GetConsumerListByGroupResponseBody.loads(ids.body).consumer_id_list) == ["c1", "c2"]
    finally:
        await other.close()
    while len(broker.broker.consumers.get("NG").channels) != 1:  # type: ignore[union-attr]
        await asyncio.sleep(0.01)
    r = await broker.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": "NG"})
    assert r.code == ResponseCode.SUCCESS and broker.broker.consumers.get("NG") is None


async def test_producer_heartbeat_and_connection_list(broker: BrokerHandle) -> None:
    data = HeartbeatData("p1", [ProducerData("PGX")], [])
    await broker.call(RequestCode.HEART_BEAT, body=data.dumps())
    r = await broker.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "PGX"})
    assert r.code == ResponseCode.SUCCESS and fastjson.loads(r.body)["connectionSet"][0]["clientId"] == "p1"
    missing = await broker.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "none"})
    assert missing.code == ResponseCode.SYSTEM_ERROR


async def test_offsets_commit_query_and_oneway(broker: BrokerHandle) -> None:
    await broker.send("OT", b"a")
    young = await broker.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "OG", "topic": "OT", "queueId": "0"}
    )
    assert young.code == ResponseCode.SUCCESS and young.ext_fields["offset"] == "0"
    update = {"consumerGroup": "OG", "topic": "OT", "queueId": "0", "commitOffset": "1"}
    assert (await broker.call(RequestCode.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
    q = await broker.call(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "OG", "topic": "OT", "queueId": "0"}
    )
    assert q.ext_fields["offset"] == "1"
    oneway = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET, {**update, "queueId": "1", "commitOffset": "9"}, oneway=True
    )
    await broker.client.invoke_oneway(broker.addr, oneway)
    while broker.broker.offsets.query_offset("OG", "OT", 1) != 9:
        await asyncio.sleep(0.01)
    # a pull with FLAG_COMMIT_OFFSET commits too
    await broker.pull("OG", "OT", 0, 1, sys_flag=0x5, commit_offset=1)
    assert broker.broker.offsets.query_offset("OG", "OT", 0) == 1


async def test_an_offset_commit_names_an_existing_topics_queue_and_a_valid_group(
    broker: BrokerHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """4.9.8 keeps whatever UPDATE_CONSUMER_OFFSET names: a peer's commits of huge invented group and
    topic names grew consumerOffset.json without bound (shipped to every slave at each metadata sync). A
    commit now names a group as a group may be named, an existing topic and a queue below its count."""
    await broker.create_topic("OT", 2)
    offsets = broker.broker.offsets
    before = dict(offsets.table)

    async def commit(group: str, topic: str, queue_id: int) -> tuple[int, str]:
        update = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": "1"}
        r = await broker.call(RequestCode.UPDATE_CONSUMER_OFFSET, update)
        return r.code, r.remark or ""

    huge = "G" * 100_000
    code, remark = await commit(huge, "OT", 0)
    assert code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and len(remark) < 300, remark
    assert (await commit("OG", "X" * 100_000, 0))[0] == ResponseCode.TOPIC_NOT_EXIST
    assert (await commit("OG", "NoSuchTopic", 0))[0] == ResponseCode.TOPIC_NOT_EXIST
    assert (await commit("OG", "OT", 2))[0] == ResponseCode.SYSTEM_ERROR
    assert (await commit("OG", "OT", -1))[0] == ResponseCode.SYSTEM_ERROR
    assert offsets.query_offset(huge, "OT", 0) < 0 and offsets.query_offset("OG", "OT", 2) < 0
    assert offsets.table == before
    # from this machine a group that does not exist yet is committed for, as 4.9.8 (mqctl's offset tools)
    assert (await commit("NewGroup", "OT", 1))[0] == ResponseCode.SUCCESS
    assert offsets.query_offset("NewGroup", "OT", 1) == 1
    # a group that exists is committed for whatever its name (created on use, or from 4.9.8's files): a
    # commit is mostly one-way, and a refusal lost its offsets unseen
    assert (await commit("my.group", "OT", 0))[0] == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    broker.broker.groups.find("my.group")
    assert (await commit("my.group", "OT", 0))[0] == ResponseCode.SUCCESS
    assert offsets.query_offset("my.group", "OT", 0) == 1
    # a one-way commit refused is told in the broker's log (its client hears nothing)
    update = {"consumerGroup": "OG", "topic": "NoSuchTopic", "queueId": "0", "commitOffset": "1"}
    oneway = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, update, oneway=True)
    with caplog.at_level("WARNING", logger="daemon.broker.processors.offset"):
        await broker.client.invoke_oneway(broker.addr, oneway)
        await wait_until(lambda: "offset commit from" in caplog.text)
    assert "topic[NoSuchTopic] not exist" in caplog.text


async def test_offsets_persist_periodically_in_a_worker_thread(tmp_path: Path) -> None:
    """Each write fsyncs the file and its directory (milliseconds): on the loop it stalled every request."""
    b = await start_broker(tmp_path / "store", flush_consumer_offset_interval=20)
    client = RemotingClient()
    offsets = b.store.configs.consumer_offsets
    persisted_on: list[int] = []
    write = offsets._write

    def recorded(text: str) -> None:
        persisted_on.append(threading.get_ident())
        write(text)

    offsets._write = recorded  # type: ignore[method-assign]
    try:
        handle = BrokerHandle(b.addr, client, b)
        await handle.create_topic("PT", 1)
        update = {"consumerGroup": "PG", "topic": "PT", "queueId": "0", "commitOffset": "5"}
        assert (await handle.call(RequestCode.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
        on_disk = ConsumerOffsetManager(
            str(tmp_path / "store" / "config" / "consumerOffset.json"), read_only=True
        )

        def written() -> bool:
            on_disk.load()
            return on_disk.query_offset("PG", "PT", 0) == 5

        await wait_until(written, timeout=10)
        assert persisted_on and threading.get_ident() not in persisted_on
    finally:
        await client.close()
        await b.stop()


async def test_queue_offset_lookups(broker: BrokerHandle) -> None:
    stamps = []
    for i in range(3):
        r = await broker.send("LT", f"{i}".encode())
        assert r.code == ResponseCode.SUCCESS
        stamps.append(broker.broker.store.get_store_timestamp("LT", 0, i))
    q = {"topic": "LT", "queueId": "0"}
    assert (await broker.call(RequestCode.GET_MAX_OFFSET, q)).ext_fields["offset"] == "3"
    assert (await broker.call(RequestCode.GET_MIN_OFFSET, q)).ext_fields["offset"] == "0"
    earliest = await broker.call(RequestCode.GET_EARLIEST_MSG_STORETIME, q)
    assert int(earliest.ext_fields["timestamp"]) == stamps[0]
    found = await broker.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": str(stamps[0] - 10_000)}
    )
    assert found.ext_fields["offset"] == "0"
    unknown = await broker.call(RequestCode.GET_MAX_OFFSET, {"topic": "Nothing", "queueId": "0"})
    assert unknown.ext_fields["offset"] == "0"


async def test_lock_batch_is_exclusive_until_unlock(broker: BrokerHandle) -> None:
    mqs = [MessageQueue("LockT", "broker-a", i) for i in range(2)]
    await broker.create_topic("LockT", 2)
    assert (await broker.heartbeat("a", "LG", ["LockT"])).code == ResponseCode.SUCCESS  # (makes the group)

    async def lock(client_id: str) -> list[MessageQueue]:
        body = LockBatchRequestBody("LG", client_id, mqs).dumps()
        r = await broker.call(RequestCode.LOCK_BATCH_MQ, body=body)
        return LockBatchResponseBody.loads(r.body).lock_ok_m_q_set

    assert await lock("a") == mqs
    assert await lock("b") == []
    assert await lock("a") == mqs
    unlock = LockBatchRequestBody("LG", "a", mqs[:1]).dumps()
    assert (await broker.call(RequestCode.UNLOCK_BATCH_MQ, body=unlock)).code == ResponseCode.SUCCESS
    assert await lock("b") == mqs[:1]


async def test_a_lock_names_only_this_brokers_queues_of_existing_topics_and_groups(
    broker: BrokerHandle, caplog: pytest.LogCaptureFixture
) -> None:
    """4.9.8 locks whatever a LOCK_BATCH_MQ names: one registered consumer locked invented
    queues (of a group that did not exist), and the table grew without bound. Queues of another broker,
    of a topic this broker lacks, past the topic's queue count, or of a group that does not exist are
    answered as not locked; a group holds `max_per_group` locks at most; a member that leaves drops its."""
    await broker.create_topic("LockT", 2)
    assert (await broker.heartbeat("a", "LG", ["LockT"])).code == ResponseCode.SUCCESS
    real = [MessageQueue("LockT", "broker-a", i) for i in range(2)]
    invented = [MessageQueue("LockT", "broker-b", 0), MessageQueue("LockT", "broker-a", 2),
                MessageQueue("NoSuchTopic", "broker-a", 0)]  # fmt: skip

    async def lock(group: str, client_id: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
        body = LockBatchRequestBody(group, client_id, mqs).dumps()
        r = await broker.call(RequestCode.LOCK_BATCH_MQ, body=body)
        assert r.code == ResponseCode.SUCCESS, r.remark  # (a refusal would break the client's rebalance)
        return LockBatchResponseBody.loads(r.body).lock_ok_m_q_set

    locks = broker.broker.locks
    assert await lock("NoSuchGroup", "a", real) == [] and locks.count() == 0
    assert await lock("LG", "a", invented + real) == real and locks.count() == 2
    locks.max_per_group = 3
    await broker.create_topic("LockU", 4)
    more = [MessageQueue("LockU", "broker-a", i) for i in range(4)]
    with caplog.at_level("WARNING", logger="daemon.broker.managers.locks"):
        assert await lock("LG", "a", more) == more[:1] and locks.count() == 3
    assert "group LG holds 3 queue locks, the most a group may" in caplog.text  # (its client says nothing)
    assert await lock("LG", "a", real) == real  # what it holds it renews at the cap
    unregister = {"clientID": "a", "consumerGroup": "LG"}
    assert (await broker.call(RequestCode.UNREGISTER_CLIENT, unregister)).code == ResponseCode.SUCCESS
    assert locks.count() == 0


async def test_lock_expires_after_max_live_time(broker: BrokerHandle) -> None:
    locks = broker.broker.locks
    mq = MessageQueue("T", "b", 0)
    locks.max_live_ms = 0
    assert locks.try_lock_batch("G", [mq], "a") == [mq]
    time.sleep(0.002)
    assert locks.try_lock_batch("G", [mq], "b") == [mq]


def test_a_lock_taken_from_one_host_is_not_released_or_renewed_from_another() -> None:
    """In protected mode a peer off the machine may heartbeat under any client id on its own
    connection: one naming a member's id unlocked the member's queues and locked them as itself. A lock
    is bound to the host that took it; this machine (host None) still renews and releases any."""
    locks = RebalanceLockManager()
    mq = MessageQueue("T", "b", 0)
    assert locks.try_lock_batch("G", [mq], "127.0.0.1@victim", "127.0.0.1") == [mq]
    locks.unlock_batch("G", [mq], "127.0.0.1@victim", "10.0.0.9")  # the thief names the victim's id
    assert locks.try_lock_batch("G", [mq], "10.0.0.9@evil", "10.0.0.9") == []
    assert locks.try_lock_batch("G", [mq], "127.0.0.1@victim", "10.0.0.9") == []  # nor renews it
    assert locks.try_lock_batch("G", [mq], "127.0.0.1@victim", "127.0.0.1") == [mq]
    locks.unlock_batch("G", [mq], "127.0.0.1@victim")  # this machine
    assert locks.count() == 0
    # a member leaving (unregistered, expired) releases the locks taken from its own host only: a thief
    # that registered under the victim's id and left must not free the victim's queues for anyone
    assert locks.try_lock_batch("G", [mq], "127.0.0.1@victim", "127.0.0.1") == [mq]
    locks.drop_client("G", "127.0.0.1@victim", "10.0.0.9")
    assert locks.count() == 1
    locks.drop_client("G", "127.0.0.1@victim", "127.0.0.1")
    assert locks.count() == 0


async def test_consumer_running_info_is_forwarded_to_the_client(broker: BrokerHandle) -> None:
    def answer(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(body=b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}')

    consumer = RemotingClient({RequestCode.GET_CONSUMER_RUNNING_INFO: answer})
    try:
        data = HeartbeatData("ci-1", [], [ConsumerData("RunG")])
        await consumer.invoke(broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=data.dumps()))
        r = await broker.call(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "RunG", "clientId": "ci-1"}
        )
        assert r.code == ResponseCode.SUCCESS and b"CONSUME_PASSIVELY" in r.body
        absent = await broker.call(
            RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "RunG", "clientId": "x"}
        )
        assert absent.code == ResponseCode.SYSTEM_ERROR and "not online" in (absent.remark or "")
    finally:
        await consumer.close()


async def test_consume_message_directly_hands_the_record_to_the_client(broker: BrokerHandle) -> None:
    seen: list[bytes] = []

    def consume(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        seen.append(request.body)
        assert request.ext_fields["brokerName"] == "broker-a"
        return request.make_response(body=b'{"consumeResult":"CR_SUCCESS","order":false}')

    consumer = RemotingClient({RequestCode.CONSUME_MESSAGE_DIRECTLY: consume})
    try:
        data = HeartbeatData("cd-1", [], [ConsumerData("DirG")])
        await consumer.invoke(broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=data.dumps()))
        sent = await broker.send("Direct", b"direct body")
        ext = {"consumerGroup": "DirG", "clientId": "cd-1", "msgId": sent.ext_fields["msgId"]}
        r = await broker.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext)
        assert r.code == ResponseCode.SUCCESS and b"CR_SUCCESS" in r.body
        assert decode_records(seen[0])[0].body == b"direct body"
    finally:
        await consumer.close()


async def test_all_producer_info(broker: BrokerHandle) -> None:
    await broker.call(RequestCode.HEART_BEAT, body=HeartbeatData("p9", [ProducerData("PG9")], []).dumps())
    r = await broker.call(RequestCode.GET_ALL_PRODUCER_INFO)
    assert fastjson.loads(r.body)["data"]["PG9"][0]["clientId"] == "p9"


async def test_a_connection_registers_a_bounded_number_of_groups(broker: BrokerHandle) -> None:
    """HEART_BEAT is open to any peer: one of 2.4 MB naming 100000 invented producer groups made the broker
    hold some 40 MB and spend seconds of its loop, per connection and again with new names every
    heartbeat (one of 16 MiB: a third of a GB). A connection is a producer and a consumer of
    MAX_CLIENT_GROUPS groups each at most, a group subscribes as many topics at most; past that the
    heartbeat is refused whole (SYSTEM_ERROR) and registers nothing."""
    cap = MAX_CLIENT_GROUPS
    many = HeartbeatData("p1", [ProducerData(f"PG{i}") for i in range(cap + 1)], [])
    r = await broker.call(RequestCode.HEART_BEAT, body=many.dumps())
    assert r.code == ResponseCode.SYSTEM_ERROR and f"{cap} at most" in (r.remark or ""), r.remark
    assert not any(g.startswith("PG") for g in broker.broker.producers.groups)
    first = HeartbeatData("p1", [ProducerData(f"PA{i}") for i in range(cap // 2 + 1)], [])
    assert (await broker.call(RequestCode.HEART_BEAT, body=first.dumps())).code == ResponseCode.SUCCESS
    again = await broker.call(RequestCode.HEART_BEAT, body=first.dumps())  # the same groups: a refresh
    assert again.code == ResponseCode.SUCCESS
    other = HeartbeatData(
        "p1", [ProducerData(f"PB{i}") for i in range(cap // 2)], []
    )  # new names: cumulative
    refused = await broker.call(RequestCode.HEART_BEAT, body=other.dumps())
    assert refused.code == ResponseCode.SYSTEM_ERROR and "producer of 1001 groups" in (refused.remark or "")
    assert not any(g.startswith("PB") for g in broker.broker.producers.groups)
    subs = [SubscriptionData(f"T{i}") for i in range(cap + 1)]
    consumer = HeartbeatData("c1", [], [ConsumerData("CG", subscription_data_set=subs)])
    refused = await broker.call(RequestCode.HEART_BEAT, body=consumer.dumps())
    assert refused.code == ResponseCode.SYSTEM_ERROR and "subscribes 1001 topics" in (refused.remark or "")
    assert broker.broker.consumers.get("CG") is None
    for i in range(cap // 2 + 1):  # unregistered, the groups make room again
        fields = {"clientID": "p1", "producerGroup": f"PA{i}"}
        assert (await broker.call(RequestCode.UNREGISTER_CLIENT, fields)).code == ResponseCode.SUCCESS
    assert (await broker.call(RequestCode.HEART_BEAT, body=other.dumps())).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    "code", [RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.BATCH_ACK_MESSAGE]
)
async def test_a_json_body_past_its_limit_is_refused_before_it_is_parsed(
    broker: BrokerHandle, code: int
) -> None:
    """A HEART_BEAT is open to any peer, and its body was parsed whole before the heartbeat's caps looked
    at it: 16 MiB of invented subscriptions held the loop for seconds, per frame. A body over
    MAX_JSON_BODY is refused (SYSTEM_ERROR, a remark naming the limit) before anything reads it; a body
    at the limit is read as before."""
    beat = HeartbeatData("big@1", [ProducerData("BigGroup")], []).dumps()
    padded = beat[:-1] + b',"pad":"' + b"x" * MAX_JSON_BODY + b'"}'
    r = await broker.call(code, body=padded, timeout=30)
    assert r.code == ResponseCode.SYSTEM_ERROR, r.remark
    assert f"body of {len(padded)} bytes" in (r.remark or "") and f"{MAX_JSON_BODY} bytes" in (r.remark or "")
    assert "BigGroup" not in broker.broker.producers.groups
    at_limit = beat[:-1] + b',"pad":"' + b"x" * (MAX_JSON_BODY - len(beat) - 9) + b'"}'
    assert len(at_limit) == MAX_JSON_BODY
    answer = await broker.call(RequestCode.HEART_BEAT, body=at_limit, timeout=30)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert "BigGroup" in broker.broker.producers.groups
