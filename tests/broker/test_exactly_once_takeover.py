"""Exactly-once where a broker's own progress is behind its log: a transaction committed without its op
record, and delay-level deliveries made after the delivery progress was last written. The copies the
killed writer left are put here by hand; tests/jepsen/test_exactly_once_failover.py kills real ones."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.broker.headers import ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader
from daemon.broker.schedule import SCHEDULE_GROUP, delivered_copy
from daemon.broker.transaction import committed_copy
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from store.commitlog import PutMessageStatus
from store.message import PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, Message, StoredMessage
from store.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from store.record import decode_msg_id, decode_records
from store.results import PutResult
from tests.support.broker import BrokerHandle, start_broker

LEVEL = 3  # 10 s: nothing falls due while a test runs


async def _count(handle: BrokerHandle, topic: str) -> list[bytes]:
    pulled = await handle.pull("G", topic, 0, 0)
    return [] if pulled.code != ResponseCode.SUCCESS else [m.body for m in decode_records(pulled.body)]


def _parked(broker: Broker, level: int, offset: int) -> StoredMessage:
    (selected,) = broker.store.get_messages(SCHEDULE_GROUP, SCHEDULE_TOPIC, level - 1, offset, 1).messages
    return selected.stored


async def _committed_without_op_record(root: Path, topic: str, key: str) -> int:
    """A broker that stored a half's committed copy but not its op record, stopped; the half's offset."""
    b = await start_broker(root)
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        props = {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": key}
        sent = await handle.send(topic, b"once", props=props)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        phys = decode_msg_id(sent.ext_fields["msgId"])[1]
        half = b.indexed_message(phys)
        assert half is not None and half.topic == TRANS_HALF_TOPIC
        assert (await b.put(committed_copy(half))).ok  # the first put; its op record never written
        return phys
    finally:
        await client.close()
        await b.stop()


async def test_a_half_committed_without_its_op_record_is_not_committed_again(tmp_path: Path) -> None:
    """The committed copy and the op record are two puts: a broker killed (or a DLedger leader deposed)
    between them left a committed half the next start checked and committed again."""
    phys = await _committed_without_op_record(tmp_path / "store", "TxK", "U1")
    b = await start_broker(tmp_path / "store", transaction_time_out=0, transaction_check_interval=3_600_000)
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        assert await _count(handle, "TxK") == [b"once"]
        assert await b.transactions.check_once() == 0  # nothing to ask: committed already
        assert 0 in b.transactions.resolved
        h = EndTransactionRequestHeader("PG", 0, phys, 8, "id", True)  # a late answer to a check
        assert (
            await handle.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        ).code == ResponseCode.SUCCESS
        assert await _count(handle, "TxK") == [b"once"]
    finally:
        await client.close()
        await b.stop()


async def test_an_end_of_a_half_committed_before_the_start_commits_nothing_again(tmp_path: Path) -> None:
    """The same through END_TRANSACTION alone (the producer's answer to a check reaching the broker)."""
    phys = await _committed_without_op_record(tmp_path / "store", "TxE", "U2")
    b = await start_broker(tmp_path / "store")
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        h = EndTransactionRequestHeader("PG", 0, phys, 8, "id", True)
        assert (
            await handle.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        ).code == ResponseCode.SUCCESS
        assert await _count(handle, "TxE") == [b"once"]
        assert 0 in b.transactions.resolved
    finally:
        await client.close()
        await b.stop()


async def test_a_half_whose_op_record_put_failed_after_its_commit_is_not_committed_again(
    tmp_path: Path,
) -> None:
    """The committed copy is stored, then its op record's put fails (a quorum timeout on the second round,
    a full disk): the half is checked again, and the producer's COMMIT answer stored a second copy."""
    b = await start_broker(tmp_path / "s", transaction_time_out=0, transaction_check_interval=3_600_000)
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        props = {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "U9"}
        sent = await handle.send("TxOp", b"once", props=props)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        phys = decode_msg_id(sent.ext_fields["msgId"])[1]
        real_put, failed = b.put, []

        async def put(msg: Message) -> PutResult:
            if msg.topic == TRANS_OP_HALF_TOPIC and not failed:  # the op record's put fails once
                failed.append(msg)
                return PutResult(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            return await real_put(msg)

        b.put = put  # type: ignore[method-assign]
        h = EndTransactionRequestHeader("PG", 0, phys, 8, "id", True)
        first = await handle.call(RequestCode.END_TRANSACTION, h.to_ext_fields())
        assert first.code == ResponseCode.SYSTEM_ERROR and failed
        assert await b.transactions.check_once() == 0  # nothing to ask: committed already
        assert 0 in b.transactions.resolved
        again = await handle.call(RequestCode.END_TRANSACTION, h.to_ext_fields())  # a late COMMIT
        assert again.code == ResponseCode.SUCCESS
        assert await _count(handle, "TxOp") == [b"once"]
    finally:
        await client.close()
        await b.stop()


@pytest.mark.parametrize("names", ["both", "queue-offset", "commitlog-offset"])
async def test_a_committed_copy_is_a_halfs_only_when_it_names_it_by_both_offsets(
    tmp_path: Path, names: str
) -> None:
    """A producer's retry stored one half twice (one UNIQ_KEY): the second's committed copy is found by
    the first's lookup too. It is the first's only when it names the first by its queue offset
    (TRAN_PREPARED_QUEUE_OFFSET) and its CommitLog offset; a record naming it by one of them is another's
    (a copy of a half from a rebuilt half queue, or a forged record)."""
    root = tmp_path / "s"
    b = await start_broker(root)
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        props = {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "SAME"}
        phys = []
        for _ in range(2):
            sent = await handle.send("TxS", b"once", props=props)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            phys.append(decode_msg_id(sent.ext_fields["msgId"])[1])
        first, second = (b.indexed_message(p) for p in phys)
        assert first is not None and second is not None
        copy = committed_copy(second)
        if names == "queue-offset":
            copy.properties[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(first.queue_offset)
        elif names == "commitlog-offset":
            copy.prepared_transaction_offset = first.commit_log_offset
        assert (await b.put(copy)).ok  # the op record lost with the broker
    finally:
        await client.close()
        await b.stop()
    b = await start_broker(root)
    try:
        first, second = (b.indexed_message(p) for p in phys)
        assert first is not None and second is not None
        assert not b.transactions._committed_before(first)
        assert b.transactions._committed_before(second) is (names == "both")
    finally:
        await b.stop()


async def _wait_pass(b: Broker, level: int, offset: int) -> None:
    for _ in range(100):
        if b.schedule.offsets.offset(level) >= offset and not b.schedule._verify:
            return
        await asyncio.sleep(0.05)


async def test_an_unclean_start_skips_the_delay_deliveries_made_since_the_progress_was_written(
    tmp_path: Path,
) -> None:
    """delayOffset.json is written every few seconds: a SIGKILL after deliveries it does not count had the
    next start deliver them again. The abort file left behind says the exit was unclean."""
    root = tmp_path / "store"
    b = await start_broker(root)
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        for i in range(3):
            r = await handle.send("Later", f"m{i}".encode(), props={"DELAY": str(LEVEL), "UNIQ_KEY": f"K{i}"})
            assert r.code == ResponseCode.SUCCESS, r.remark
        for offset in (0, 1):  # delivered by the killed broker, its progress not written
            assert (await b.put(delivered_copy(_parked(b, LEVEL, offset)))).ok
    finally:
        await b.stop()
    (root / "abort").write_bytes(b"")
    b = await start_broker(root)
    try:
        await _wait_pass(b, LEVEL, 2)
        assert b.schedule.offsets.offset(LEVEL) == 2 and b.schedule.found == 2  # m2 is still to come
    finally:
        await client.close()
        await b.stop()


async def test_a_clean_start_trusts_its_delay_progress(broker: BrokerHandle) -> None:
    """No pass (no lookups) where the progress was written at a clean stop."""
    assert not broker.broker.schedule._verify and broker.broker.schedule.found == 0


async def test_the_takeover_pass_tells_a_consumers_next_send_back_from_a_delivered_one(
    broker: BrokerHandle,
) -> None:
    """Consumer retries (CONSUMER_SEND_MSG_BACK) go through the delay levels with the message's UNIQ_KEY
    kept: its first retry delivered, its second (one more reconsume time) is parked, not delivered."""
    b = broker.broker
    sent = await broker.send("RT", b"retry-me", props={"UNIQ_KEY": "R1"})
    phys = decode_msg_id(sent.ext_fields["msgId"])[1]

    async def send_back(offset: int) -> None:
        h = ConsumerSendMsgBackRequestHeader(offset, "RG", LEVEL, None, None, False, None)
        assert (await broker.call(RequestCode.CONSUMER_SEND_MSG_BACK, h.to_ext_fields())).code == 0

    await send_back(phys)
    first = _parked(b, LEVEL, 0)
    put = await b.put(delivered_copy(first))
    assert put.ok
    await send_back(put.phys_offset)
    second = _parked(b, LEVEL, 1)
    assert second.reconsume_times == first.reconsume_times + 1
    assert await b.schedule.skip_delivered(LEVEL) == 1
    assert b.schedule.offsets.offset(LEVEL) == 1  # the second retry is delivered when due
    assert await _count(broker, "%RETRY%RG") == [b"retry-me"]


@pytest.mark.parametrize(
    ("levels", "left"), [((LEVEL, LEVEL), 1), ((2, LEVEL), 0)], ids=["twice-at-one-level", "at-two-levels"]
)
async def test_each_send_back_of_one_message_is_delivered(
    tmp_path: Path, levels: tuple[int, int], left: int
) -> None:
    """The same stored message sent back twice by its group: at one level (two consumers during a
    rebalance), two identical entries; or at level 2 (the listener's delayLevelWhenNextConsume) and level
    3 (an expired consume's send-back). The first was delivered before the unclean exit; the pass took
    level 3's other entry for delivered too (one copy found for both), and it was never delivered."""
    root = tmp_path / "s"
    b = await start_broker(root)
    client = RemotingClient()
    try:
        handle = BrokerHandle(b.addr, client, b)
        sent = await handle.send("RT", b"retry-me", props={"UNIQ_KEY": "R1"})
        phys = decode_msg_id(sent.ext_fields["msgId"])[1]
        for level in levels:
            h = ConsumerSendMsgBackRequestHeader(phys, "RG", level, None, None, False, None)
            assert (await handle.call(RequestCode.CONSUMER_SEND_MSG_BACK, h.to_ext_fields())).code == 0
        assert (await b.put(delivered_copy(_parked(b, levels[0], 0)))).ok
        if levels[0] != LEVEL:
            b.schedule.offsets.set_offset(levels[0], 1)  # its progress written
    finally:
        await client.close()
        await b.stop()
    assert await _offset_after_the_pass(root, LEVEL) == left


def _order(body: bytes, *, born: int = 1_700_000_000_000, reconsume_times: int = 0) -> Message:
    """A delayed message whose producer set its UNIQ_KEY itself (a business id, which a 4.x producer's
    MessageClientIDSetter keeps)."""
    return Message(
        "Orders",
        body,
        properties={"DELAY": str(LEVEL), "UNIQ_KEY": "ORDER-1"},
        born_timestamp=born,
        born_host=("127.0.0.1", 1),
        store_host=("127.0.0.1", 2),
        reconsume_times=reconsume_times,
    )


DELIVER_FIRST = -1  # a step of _parked_and_delivered: deliver entry 0


@pytest.mark.parametrize("progress", [0, 1], ids=["progress-before-both", "progress-written-after-one"])
@pytest.mark.parametrize(
    "steps",
    [
        [_order(b"order-1 created"), _order(b"order-1 paid"), DELIVER_FIRST],
        [_order(b"paid"), _order(b"paid", born=1_700_000_000_001), DELIVER_FIRST],
        [_order(b"retry", reconsume_times=1), _order(b"retry", reconsume_times=2), DELIVER_FIRST],
        [_order(b"paid"), DELIVER_FIRST, _order(b"paid")],
    ],
    ids=["another-body", "another-born-time", "more-reconsume-times", "copy-older-than-the-entry"],
)
async def test_the_pass_skips_an_entry_for_its_own_copy_only(
    tmp_path: Path, steps: list[Message | int], progress: int
) -> None:
    """Two entries with one UNIQ_KEY, the first delivered: the second is no delivery of that copy when its
    body, born time or reconsume times differ, or when it was parked after the copy was stored (the same
    message parked again). Taken for delivered, it was never delivered: lost. With the progress written
    after the first's delivery, only the entry's own conditions keep it; before both, the copy is also
    the first's."""
    root = tmp_path / "s"
    b = await start_broker(root)
    client = RemotingClient()
    try:
        await BrokerHandle(b.addr, client, b).create_topic("Orders", 1)
        for step in steps:
            put = step if isinstance(step, Message) else delivered_copy(_parked(b, LEVEL, 0))
            assert (await b.put(put)).ok
        b.schedule.offsets.set_offset(LEVEL, progress)
    finally:
        await client.close()
        await b.stop()
    assert await _offset_after_the_pass(root, LEVEL) == 1


async def _offset_after_the_pass(root: Path, level: int) -> int:
    """The level's offset after the takeover pass of a start after an unclean exit."""
    (root / "abort").write_bytes(b"")
    b = await start_broker(root)
    try:
        for _ in range(200):
            if not b.schedule._verify:
                break
            await asyncio.sleep(0.05)
        assert not b.schedule._verify, "the takeover pass did not end"
        return b.schedule.offsets.offset(level)
    finally:
        await b.stop()
