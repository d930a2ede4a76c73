"""Send, pull, long polling, retry, DLQ, delay, query and view against a real broker over TCP."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path

import pytest

from daemon.broker.bodies import HeartbeatData, ProducerData
from daemon.broker.broker import Broker
from daemon.broker.config import BrokerConfig
from daemon.broker.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    PullMessageRequestHeader,
    QueryMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from daemon.broker.processors.query import QUERY_BODY_BYTES
from daemon.remoting.client import RemotingClient, parse_addr
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection
from daemon.remoting.frame import decode_frame, encode_command
from store.memory import InMemoryMessageStore
from store.message import COMPRESSED_FLAG, StoredMessage
from store.record import MAX_INFLATED_BODY, decode_msg_id, decode_record, decode_records
from tests.support.broker import BrokerHandle, batch_entry, broker_config, send_fields, start_broker


async def test_send_v2_then_pull_returns_identical_message(broker: BrokerHandle) -> None:
    body = bytes(range(256)) * 4
    sent = await broker.send("OrderTopic", body, queue_id=1, tags="TagA", keys="k1 k2")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.ext_fields["queueId"] == "1" and sent.ext_fields["queueOffset"] == "0"
    (host, port), phys = decode_msg_id(sent.ext_fields["msgId"])
    assert f"{host}:{port}" == broker.addr

    pulled = await broker.pull("G1", "OrderTopic", 1, 0)
    assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
    assert pulled.ext_fields["nextBeginOffset"] == "1"
    assert pulled.ext_fields["maxOffset"] == "1" and pulled.ext_fields["minOffset"] == "0"
    (msg,) = decode_records(pulled.body)
    assert msg.body == body and msg.topic == "OrderTopic" and msg.queue_id == 1
    assert msg.tags == "TagA" and msg.keys == ["k1", "k2"]
    assert msg.properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in msg.properties
    assert msg.commit_log_offset == phys and msg.msg_id == sent.ext_fields["msgId"]


async def test_send_v1_header_and_auto_created_topic_queue_count(broker: BrokerHandle) -> None:
    sent = await broker.send("AutoTopic", b"v1", code=RequestCode.SEND_MESSAGE_V2)
    assert sent.code == ResponseCode.SUCCESS
    config = broker.broker.topics.get("AutoTopic")
    assert config is not None and config.write_queue_nums == 4 and config.perm == 6
    v1 = {
        "producerGroup": "PG",
        "topic": "AutoTopic",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "2",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "7",
        "properties": "",
    }
    r = await broker.call(RequestCode.SEND_MESSAGE, v1, b"legacy")
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueId"] == "2"
    (msg,) = decode_records((await broker.pull("G", "AutoTopic", 2, 0)).body)
    assert msg.flag == 7 and msg.body == b"legacy"


async def test_send_refusals(tmp_path: Path) -> None:
    b = await start_broker(tmp_path / "s", auto_create_topic_enable=False)
    handle = BrokerHandle(b.addr, RemotingClient(), b)
    try:
        missing = await handle.send("NoSuchTopic", b"x")
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        assert (await handle.send("SCHEDULE_TOPIC_XXXX", b"x")).code == ResponseCode.NO_PERMISSION
        bad = await handle.send("bad topic!", b"x")
        assert bad.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (bad.remark or "")
        b.topics.create_system_like("Small", 2, 6)
        assert (await handle.send("Small", b"x", queue_id=5)).code == ResponseCode.SYSTEM_ERROR
    finally:
        await handle.client.close()
        await b.stop()


async def test_pull_status_codes_follow_the_outcome_table(broker: BrokerHandle) -> None:
    b = broker.broker
    b.topics.create_system_like("PT", 2, 6)
    empty = await broker.pull("G", "PT", 0, 0)
    assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.ext_fields["nextBeginOffset"] == "0"
    for i in range(3):
        await broker.send("PT", f"m{i}".encode())
    caught_up = await broker.pull("G", "PT", 0, 3)
    assert caught_up.code == ResponseCode.PULL_NOT_FOUND and caught_up.remark == "OFFSET_OVERFLOW_ONE"
    assert caught_up.ext_fields["nextBeginOffset"] == "3"
    badly = await broker.pull("G", "PT", 0, 10)
    assert badly.code == ResponseCode.PULL_OFFSET_MOVED and badly.remark == "OFFSET_OVERFLOW_BADLY"
    assert int(badly.ext_fields["nextBeginOffset"]) <= 3  # Java: min offset when it is 0, else max offset
    unknown_queue = await broker.pull("G", "PT", 1, 5)
    assert unknown_queue.code == ResponseCode.PULL_OFFSET_MOVED
    illegal = await broker.pull("G", "PT", 7, 0)
    assert illegal.code == ResponseCode.SYSTEM_ERROR
    assert (await broker.pull("G", "Nope", 0, 0)).code == ResponseCode.TOPIC_NOT_EXIST
    some = await broker.pull("G", "PT", 0, 1, max_nums=1)
    assert [m.body for m in decode_records(some.body)] == [b"m1"]
    assert some.ext_fields["nextBeginOffset"] == "2"


async def test_tag_filter_skips_other_tags_but_advances(broker: BrokerHandle) -> None:
    for tag in ("A", "B", "A", "C"):
        await broker.send("Tagged", tag.encode(), tags=tag)
    got = await broker.pull("G", "Tagged", 0, 0, subscription="A || C")
    assert [m.body for m in decode_records(got.body)] == [b"A", b"A", b"C"]
    assert got.ext_fields["nextBeginOffset"] == "4"
    none = await broker.pull("G", "Tagged", 0, 1, subscription="Z", max_nums=1)
    assert none.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND)


async def test_pull_without_subscription_uses_heartbeat_state(broker: BrokerHandle) -> None:
    await broker.send("HB", b"x")
    no_group = await broker.pull("HG", "HB", 0, 0, sys_flag=0)
    assert no_group.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    assert (await broker.heartbeat("c1", "HG", ["HB"])).code == ResponseCode.SUCCESS
    ok = await broker.pull("HG", "HB", 0, 0, sys_flag=0)
    assert ok.code == ResponseCode.SUCCESS and decode_records(ok.body)[0].body == b"x"


async def test_long_poll_wakes_when_a_message_arrives(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("LP", 1, 6)
    pending = asyncio.create_task(broker.pull("G", "LP", 0, 0, sys_flag=0x6, suspend_ms=20_000, timeout=30))
    while broker.broker.hold.parked == 0:
        await asyncio.sleep(0.01)
    assert not pending.done()
    await broker.send("LP", b"wake")
    woke = await pending
    assert woke.code == ResponseCode.SUCCESS and decode_records(woke.body)[0].body == b"wake"


async def test_long_poll_times_out_with_not_found(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("LP2", 1, 6)
    await broker.send("LP2", b"first")
    r = await broker.pull("G", "LP2", 0, 1, sys_flag=0x6, suspend_ms=200)
    assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext_fields["nextBeginOffset"] == "1"


async def test_a_slow_long_poll_does_not_block_the_same_connection(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("LP3", 1, 6)
    held = asyncio.create_task(broker.pull("G", "LP3", 0, 0, sys_flag=0x6, suspend_ms=20_000, timeout=30))
    while broker.broker.hold.parked == 0:
        await asyncio.sleep(0.01)
    sent = await broker.send("LP3", b"after")  # same pooled connection as the held pull
    assert sent.code == ResponseCode.SUCCESS
    assert (await held).code == ResponseCode.SUCCESS


async def test_batch_send_gives_consecutive_offsets_and_joined_ids(broker: BrokerHandle) -> None:
    payload = b"".join(
        batch_entry(f"b{i}".encode(), {"KEYS": f"bk{i}", "UNIQ_KEY": f"U{i}"}) for i in range(3)
    )
    r = await broker.send("Batch", payload, code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert len(r.ext_fields["msgId"].split(",")) == 3 and r.ext_fields["queueOffset"] == "0"
    msgs = decode_records((await broker.pull("G", "Batch", 0, 0)).body)
    assert [(m.body, m.queue_offset, m.keys) for m in msgs] == [
        (b"b0", 0, ["bk0"]),
        (b"b1", 1, ["bk1"]),
        (b"b2", 2, ["bk2"]),
    ]
    assert all(m.properties["CLUSTER"] == "DefaultCluster" for m in msgs)


async def test_view_by_id_and_query_by_key(broker: BrokerHandle) -> None:
    sent = await broker.send("Q", b"findme", keys="order-1 order-2", props={"UNIQ_KEY": "ABCDEF"})
    _, phys = decode_msg_id(sent.ext_fields["msgId"])
    viewed = await broker.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
    assert viewed.code == ResponseCode.SUCCESS and decode_records(viewed.body)[0].body == b"findme"
    missing = await broker.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys + 10**6)})
    assert missing.code == ResponseCode.SYSTEM_ERROR

    def query(key: str, unique: bool = False) -> dict[str, str]:
        ext = QueryMessageRequestHeader("Q", key, 64, 0, 2**62).to_ext_fields()
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        return ext

    by_key = await broker.call(RequestCode.QUERY_MESSAGE, query("order-2"))
    assert by_key.code == ResponseCode.SUCCESS and decode_records(by_key.body)[0].body == b"findme"
    assert "indexLastUpdateTimestamp" in by_key.ext_fields
    by_uniq = await broker.call(RequestCode.QUERY_MESSAGE, query("ABCDEF", unique=True))
    assert decode_records(by_uniq.body)[0].body == b"findme"
    nothing = await broker.call(RequestCode.QUERY_MESSAGE, query("absent"))
    assert nothing.code == ResponseCode.QUERY_NOT_FOUND


async def _send_back(
    broker: BrokerHandle, phys: int, group: str, delay: int, max_times: int | None = None
) -> int:
    h = ConsumerSendMsgBackRequestHeader(phys, group, delay, None, None, False, max_times)
    return (await broker.call(RequestCode.CONSUMER_SEND_MSG_BACK, h.to_ext_fields())).code


@pytest.mark.slow
async def test_send_back_goes_through_delay_level_to_retry_topic(broker: BrokerHandle) -> None:
    sent = await broker.send("RT", b"retry-me", tags="T")
    _, phys = decode_msg_id(sent.ext_fields["msgId"])
    assert await _send_back(broker, phys, "RG", 1) == ResponseCode.SUCCESS
    parked = decode_records((await broker.pull("X", "SCHEDULE_TOPIC_XXXX", 0, 0)).body)
    assert parked[0].properties["REAL_TOPIC"] == "%RETRY%RG" and parked[0].properties["DELAY"] == "1"
    # level 1 = 1 s: wait for the schedule service with a long poll on the retry queue
    got = await broker.pull("RG", "%RETRY%RG", 0, 0, sys_flag=0x6, suspend_ms=15_000, timeout=20)
    (msg,) = decode_records(got.body)
    assert msg.body == b"retry-me" and msg.reconsume_times == 1
    # as store-a's retried copies: DELAY, REAL_TOPIC and REAL_QID stay in the stored properties
    assert msg.properties["RETRY_TOPIC"] == "RT" and msg.properties["DELAY"] == "1"
    assert msg.properties["REAL_TOPIC"] == "%RETRY%RG" and msg.properties["WAIT"] == "false"
    assert msg.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
    assert broker.broker.store.configs.delay_offsets.table[1] == 1


async def test_a_compressed_body_bomb_is_not_inflated_by_a_send_back(broker: BrokerHandle) -> None:
    """A producer (anyone, in protected mode) stores a body flagged compressed whose zeros inflate to
    far more than any producer could have compressed (maxMessageSize bounds the body before it is
    compressed); a send-back of it, which any consumer may ask, inflated it whole in the broker, and
    then was refused past the cap. It is copied as stored, never inflated (4.9.8 looks the message up
    without inflating it), and so is a real compressed body."""
    bomb = zlib.compress(b"\0" * (2 * MAX_INFLATED_BODY), 9)
    fields = send_fields("Bomb")
    fields["f"] = str(COMPRESSED_FLAG)  # sysFlag
    for body in (bomb, zlib.compress(b"real " * 1000)):
        sent = await broker.call(RequestCode.SEND_MESSAGE_V2, fields, body)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        _, phys = decode_msg_id(sent.ext_fields["msgId"])
        assert await _send_back(broker, phys, "BG", 0, max_times=0) == ResponseCode.SUCCESS
    dead = _as_stored((await broker.pull("X", "%DLQ%BG", 0, 0)).body)
    assert [m.stored_body for m in dead] == [bomb, zlib.compress(b"real " * 1000)]
    assert all(m.sys_flag & COMPRESSED_FLAG for m in dead)


def _as_stored(body: bytes) -> list[StoredMessage]:
    """A pull's records, their bodies as stored (a compressed one not inflated)."""
    out = []
    pos = 0
    while pos < len(body):
        out.append(decode_record(body, pos, inflate=False))
        pos += out[-1].store_size
    return out


@pytest.mark.slow
async def test_a_body_that_does_not_inflate_stalls_no_delay_level(broker: BrokerHandle) -> None:
    """A delayed message whose compressed body does not inflate (past the cap, or a codec not installed
    here): the delay level's re-put read it inflated, failed, and tried it again for ever, so no later
    message of that level (anyone's, in protected mode) was delivered. It is re-put as stored."""
    bomb = zlib.compress(b"\0" * (MAX_INFLATED_BODY + 1), 9)
    fields = send_fields("Later", props={"DELAY": "1"})
    fields["f"] = str(COMPRESSED_FLAG)
    assert (await broker.call(RequestCode.SEND_MESSAGE_V2, fields, bomb)).code == ResponseCode.SUCCESS
    assert (await broker.send("Later", b"after it", props={"DELAY": "1"})).code == ResponseCode.SUCCESS
    got: list[bytes] = []
    for _ in range(3):  # a long poll each (level 1 is 1 s), until both came
        pulled = await broker.pull("LG", "Later", 0, len(got), sys_flag=0x6, suspend_ms=10_000, timeout=15)
        got += [m.stored_body for m in _as_stored(pulled.body)]
        if len(got) == 2:
            break
    assert got == [bomb, b"after it"]


async def test_send_back_past_max_times_goes_to_dlq(broker: BrokerHandle) -> None:
    sent = await broker.send("DT", b"dead")
    _, phys = decode_msg_id(sent.ext_fields["msgId"])
    assert await _send_back(broker, phys, "DG", 0, max_times=0) == ResponseCode.SUCCESS
    (msg,) = decode_records((await broker.pull("X", "%DLQ%DG", 0, 0)).body)
    assert msg.body == b"dead" and msg.reconsume_times == 1 and "DELAY" not in msg.properties
    assert await _send_back(broker, phys + 10**6, "DG", 0) == ResponseCode.SYSTEM_ERROR


async def test_client_resend_to_retry_topic_beyond_max_goes_to_dlq(broker: BrokerHandle) -> None:
    r = await broker.send(
        "%RETRY%CG", b"again", reconsume_times=3, max_reconsume_times=3, props={"DELAY": "5"}
    )
    assert r.code == ResponseCode.SUCCESS
    (msg,) = decode_records((await broker.pull("X", "%DLQ%CG", 0, 0)).body)
    assert msg.body == b"again" and msg.reconsume_times == 3


@pytest.mark.slow
async def test_delayed_send_is_parked_then_delivered(broker: BrokerHandle) -> None:
    r = await broker.send("Later", b"soon", props={"DELAY": "1"})
    assert r.code == ResponseCode.SUCCESS
    assert (await broker.pull("G", "Later", 0, 0)).code == ResponseCode.PULL_NOT_FOUND
    got = await broker.pull("G", "Later", 0, 0, sys_flag=0x6, suspend_ms=15_000, timeout=20)
    (msg,) = decode_records(got.body)
    assert msg.body == b"soon" and msg.properties["REAL_TOPIC"] == "Later" and msg.properties["DELAY"] == "1"
    assert msg.properties["REAL_QID"] == "0"
    assert (await broker.pull("G", "Later", 0, 1)).code == ResponseCode.PULL_NOT_FOUND  # not parked again


async def test_transaction_half_message_is_invisible_until_committed(broker: BrokerHandle) -> None:
    async def half(body: bytes) -> int:
        r = await broker.send("TxT", body, props={"TRAN_MSG": "true", "PGROUP": "TxPG"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        return decode_msg_id(r.ext_fields["msgId"])[1]

    committed, rolled_back = await half(b"commit-me"), await half(b"roll-me-back")
    assert (await broker.pull("G", "TxT", 0, 0)).code == ResponseCode.PULL_NOT_FOUND
    for phys, decision in ((committed, 8), (rolled_back, 12)):
        h = EndTransactionRequestHeader("TxPG", 0, phys, decision, "id")
        assert (
            await broker.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        ).code == ResponseCode.SUCCESS
    msgs = decode_records((await broker.pull("G", "TxT", 0, 0)).body)
    assert [m.body for m in msgs] == [b"commit-me"] and "TRAN_MSG" not in msgs[0].properties


async def test_a_transaction_service_started_later_knows_the_transactions_ended_since_its_load(
    broker: BrokerHandle,
) -> None:
    """A DLedger follower loads its op records at its start and is elected later: the transactions its
    leaders ended meanwhile must count as ended when it starts checking, or a committed half is committed
    again and a rolled back one is checked (and may be committed)."""
    from daemon.broker.transaction import TransactionService

    elected_later = TransactionService(broker.broker)
    elected_later.load()
    for body, decision in ((b"commit-me", 8), (b"roll-me-back", 12)):
        r = await broker.send("TxL", body, props={"TRAN_MSG": "true", "PGROUP": "TxPG"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        h = EndTransactionRequestHeader("TxPG", 0, decode_msg_id(r.ext_fields["msgId"])[1], decision, "id")
        assert (
            await broker.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        ).code == ResponseCode.SUCCESS
    assert elected_later.resolved == set()
    elected_later.start()
    try:
        assert elected_later.resolved == {0, 1}
    finally:
        await elected_later.stop()


async def test_broker_runs_on_the_in_memory_store(tmp_path: Path) -> None:
    def memory(config: BrokerConfig) -> InMemoryMessageStore:
        return InMemoryMessageStore(config.store_config(), store_host=(config.broker_ip1, config.listen_port))

    async with Broker(broker_config(tmp_path / "mem"), store_factory=memory) as b:
        handle = BrokerHandle(b.addr, RemotingClient(), b)
        try:
            assert (await handle.send("Mem", b"in memory", tags="T")).code == ResponseCode.SUCCESS
            (msg,) = decode_records((await handle.pull("G", "Mem", 0, 0)).body)
            assert msg.body == b"in memory" and msg.tags == "T"
        finally:
            await handle.client.close()


async def test_unended_half_message_is_checked_with_its_producer(tmp_path: Path) -> None:
    b = await start_broker(tmp_path / "s", transaction_time_out=0, transaction_check_interval=100)
    checks: list[RemotingCommand] = []
    answered = asyncio.Event()

    def on_check(
        conn: Connection, request: RemotingCommand
    ) -> None:  # a producer's TransactionListener: commit
        checks.append(request)
        h = EndTransactionRequestHeader(
            "TxPG",
            int(request.ext_fields["tranStateTableOffset"]),
            int(request.ext_fields["commitLogOffset"]),
            8,
            request.ext_fields["msgId"],
            True,
        )
        conn.invoke_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, h.to_ext_fields()))
        answered.set()

    producer = RemotingClient({RequestCode.CHECK_TRANSACTION_STATE: on_check})
    handle = BrokerHandle(b.addr, producer, b)
    try:
        await handle.call(
            RequestCode.HEART_BEAT, body=HeartbeatData("tx-1", [ProducerData("TxPG")], []).dumps()
        )
        sent = await handle.send("TxChecked", b"decided later", props={"TRAN_MSG": "true", "PGROUP": "TxPG"})
        assert sent.code == ResponseCode.SUCCESS
        await asyncio.wait_for(answered.wait(), 10)
        assert decode_records(checks[0].body)[0].body == b"decided later"
        got = await handle.pull("G", "TxChecked", 0, 0, sys_flag=0x6, suspend_ms=5000, timeout=10)
        (msg,) = decode_records(got.body)
        assert msg.body == b"decided later" and msg.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
        while b.offsets.query_offset("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0) != 1:
            await asyncio.sleep(0.05)  # the next pass sees the op record and moves past the half
        assert len(checks) == 1
    finally:
        await producer.close()
        await b.stop()


async def test_a_halfs_check_immunity_time_is_honoured_and_holds_back_no_other_half(tmp_path: Path) -> None:
    """A 4.x producer's CHECK_IMMUNITY_TIME_IN_SECONDS (4.9.8's `TransactionalMessageServiceImpl`): a half
    is checked once its own time has passed, earlier or later than `transactionTimeOut`, and one still
    immune does not keep the halves after it from their check. Before, the property was not read."""
    b = await start_broker(tmp_path / "s", transaction_time_out=60_000, transaction_check_interval=3_600_000)
    asked: list[bytes] = []
    arrived = asyncio.Event()

    def on_check(conn: Connection, request: RemotingCommand) -> None:
        asked.append(decode_records(request.body)[0].body)
        arrived.set()

    producer = RemotingClient({RequestCode.CHECK_TRANSACTION_STATE: on_check})
    handle = BrokerHandle(b.addr, producer, b)
    try:
        await handle.call(
            RequestCode.HEART_BEAT, body=HeartbeatData("tx-1", [ProducerData("TxPG")], []).dumps()
        )
        halves = {
            b"immune for 600 s": "600",
            b"immune for 0 s": "0",
            b"not a number": "soon",  # (Java: transactionTimeOut)
            b"no property": None,
        }
        for body, immunity in halves.items():
            props = {"TRAN_MSG": "true", "PGROUP": "TxPG"}
            if immunity is not None:
                props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = immunity
            assert (await handle.send("TxImmune", body, props=props)).code == ResponseCode.SUCCESS
        for _ in range(3):
            await b.transactions.check_once()
            await asyncio.wait_for(arrived.wait(), 10)
            await asyncio.sleep(0.2)  # (any other check would be on its way too)
        assert set(asked) == {b"immune for 0 s"}
    finally:
        await producer.close()
        await b.stop()


async def test_a_send_right_behind_a_held_pull_wakes_it(broker: BrokerHandle) -> None:
    """Pull and send in one TCP write: the broker reads the pull (nothing yet), then stores the message
    before the held pull's coroutine first runs. That message must wake the pull, not the periodic
    check (pushed out of reach here) or the pull's 60 s suspend timeout."""
    hold = broker.broker.hold
    await hold.stop()
    hold.check_interval = 3600
    hold.start()
    broker.broker.topics.create_system_like("LP4", 1, 6)
    pull = PullMessageRequestHeader("G", "LP4", 0, 0, 32, 0x6, 0, 60_000, 0, "*", "TAG")
    send = SendMessageRequestHeaderV2("PG", "LP4", "TBW102", 4, 0, 0, 0, 0, "")
    frames = [
        RemotingCommand.request(RequestCode.PULL_MESSAGE, pull.to_ext_fields()),
        RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send.to_ext_fields(), b"behind"),
    ]
    for opaque, frame in enumerate(frames, 1):
        frame.opaque = opaque
    reader, writer = await asyncio.open_connection(*parse_addr(broker.addr))
    try:
        writer.write(b"".join(encode_command(f) for f in frames))
        responses = {}
        for _ in frames:
            r = await asyncio.wait_for(_read_command(reader), 10)
            responses[r.opaque] = r
    finally:
        writer.close()
    assert responses[2].code == ResponseCode.SUCCESS
    assert responses[1].code == ResponseCode.SUCCESS
    assert decode_records(responses[1].body)[0].body == b"behind"


async def _read_command(reader: asyncio.StreamReader) -> RemotingCommand:
    head = await reader.readexactly(4)
    decoded = decode_frame(head + await reader.readexactly(int.from_bytes(head, "big")), 0)
    assert decoded is not None
    return decoded[0]


async def test_two_concurrent_commits_of_one_half_store_it_once(tmp_path: Path) -> None:
    """A producer's commit and its answer to a check (or a retried commit) arriving together: each waits
    for its put (SYNC_FLUSH here, a DLedger quorum there), and both found the half not yet ended."""
    b = await start_broker(tmp_path / "s", flush_disk_type="SYNC_FLUSH")
    handle = BrokerHandle(b.addr, RemotingClient(), b)
    try:
        r = await handle.send("TxC", b"once", props={"TRAN_MSG": "true", "PGROUP": "TxPG"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        h = EndTransactionRequestHeader("TxPG", 0, decode_msg_id(r.ext_fields["msgId"])[1], 8, "id")
        await asyncio.gather(*(b.transactions.end(h) for _ in range(3)))
        msgs = decode_records((await handle.pull("G", "TxC", 0, 0)).body)
        assert [m.body for m in msgs] == [b"once"]
    finally:
        await handle.client.close()
        await b.stop()


async def test_a_query_answers_the_hits_that_fit_in_a_frame(broker: BrokerHandle) -> None:
    """Anyone may send messages of 4 MiB under one key; a query of that key then made one answer of every
    hit (up to 64: 256 MiB on the loop), refused whole as over a frame ('frame of ... exceeds'), so the
    key's query answered nothing. It answers the first hits by offset that fit in a frame."""
    broker.broker.topics.create_system_like("BigKeys", 1, 6)
    body = b"b" * (4 * 1024 * 1024 - 1024)
    for _ in range(5):
        sent = await broker.send("BigKeys", body, keys="heavy", timeout=30)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    fields = {"topic": "BigKeys", "key": "heavy", "maxNum": "64", "beginTimestamp": "0"}
    fields["endTimestamp"] = str(2**62)
    answer = None
    for _ in range(100):  # (the index is built behind the sends)
        answer = await broker.call(RequestCode.QUERY_MESSAGE, fields, timeout=30)
        if answer.code == ResponseCode.SUCCESS and len(decode_records(answer.body)) == 3:
            break
        await asyncio.sleep(0.1)
    assert answer is not None and answer.code == ResponseCode.SUCCESS, answer and answer.remark
    found = decode_records(answer.body)
    assert len(found) == 3 and all(m.body == body for m in found)  # a fourth would pass 16 MiB
    assert len(answer.body) <= QUERY_BODY_BYTES
