"""What a DLedger member taking over lends of FIFO queues and of lendings ended by a copy (a group of one,
in this process: its POP service stopped and taken over as an elected member's is, with the offset table
a follower took before the lendings).

A FIFO lending (a first one or a redelivery) is logged as a checkpoint before the pop answers, so the
member taking over keeps the queue's order lock until the lending runs out, then lends the same messages
again in order with their attempt counted: never a message of a lent queue twice at once, never one out
of its order. A lending ended by a copy (into the retry topic or the DLQ) is logged before the copy is
put: a member taking over lends the message no more, and puts the copy when the log lacks it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from daemon.broker import pop as pop_module
from daemon.broker.broker import Broker
from daemon.broker.pop import PopError, PopService
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import ResponseCode
from store.commitlog import PutMessageStatus
from store.message import Message
from store.names import REVIVE_GROUP
from store.results import PutResult
from tests.dledger.test_pop_revive_read import leader_of_one
from tests.support.broker import BrokerClient
from tests.support.pop import PopClient, Popped
from tests.support.waiting import wait_until

T = "PopTake"
G = "GPopTake"
DLQ = f"%DLQ%{G}"
RETRY = f"%RETRY%{G}"


def table_of_before(broker: Broker) -> list[tuple[tuple[str, str, int], int]]:
    """The group's offsets of queue 0 and the revive offset, as a follower took them now."""
    keys = [(G, T, 0), (REVIVE_GROUP, broker.pop.revive_topic, 0)]
    return [(key, broker.offsets.query_offset(*key)) for key in keys]


async def taken_over_with(
    pop: PopService, broker: Broker, table: list[tuple[tuple[str, str, int], int]]
) -> None:
    """`pop` stopped, and started again as a member elected with `table` starts it."""
    await pop.stop()
    for key, offset in table:
        broker.offsets.commit_offset(*key, offset)
    pop.take_over()
    await pop.catch_up()
    pop.start()


async def sent(on: BrokerClient, count: int) -> PopClient:
    """Topic T of one queue holding `count` messages m0, m1, ...: a consumer of group G on it."""
    await on.create_topic(T, 1)
    for i in range(count):
        assert (await on.send(T, f"m{i}".encode(), queue_id=0)).code == 0
    return PopClient(on, G)


async def pop_until(consumer: PopClient, count: int, seconds: float, **options: object) -> list[Popped]:
    """FIFO pops of queue 0 until `count` messages came (or `seconds` passed)."""
    got: list[Popped] = []
    deadline = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.pop(T, queue_id=0, max_nums=32, order=True, poll_ms=500, **options)
    return got


async def test_a_fifo_lending_keeps_its_queue_locked_on_a_member_taking_over(tmp_path: Path) -> None:
    """Three messages lent for 60 s by a FIFO pop: the member taking over lends none of them (nor the
    next) while the lending lasts, takes their handles, and lends what follows once they are acked."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 3)
        table = table_of_before(broker)
        lent = await consumer.pop(T, queue_id=0, max_nums=3, order=True, invisible_ms=60_000)
        assert [p.body for p in lent] == [b"m0", b"m1", b"m2"]
        await taken_over_with(broker.pop, broker, table)
        assert (await on.send(T, b"m3", queue_id=0)).code == 0

        assert await consumer.pop(T, queue_id=0, max_nums=32, order=True, invisible_ms=60_000) == []
        for p in lent:  # the old leader's handles are the new leader's
            assert (await consumer.ack(T, p)).code == ResponseCode.SUCCESS
        after = await consumer.pop(T, queue_id=0, max_nums=32, order=True, invisible_ms=60_000)
        assert [(p.body, p.attempt) for p in after] == [(b"m3", 1)]


async def test_a_fifo_redelivery_is_logged_so_a_member_taking_over_keeps_its_order_and_attempts(
    tmp_path: Path,
) -> None:
    """A FIFO lending of three, one of them changed to run out at once (its checkpoint logged), comes
    back as a redelivery of all three lent for 60 s. The member taking over neither lends the changed
    one again at once by its old checkpoint, nor alone before the ones below it: the queue stays locked,
    and when the redelivery runs out the three come back in order, a third attempt."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 3)
        table = table_of_before(broker)
        lent = await consumer.pop(T, queue_id=0, max_nums=3, order=True, invisible_ms=60_000)
        assert (await consumer.change_invisible(T, lent[1], 200)).code == ResponseCode.SUCCESS
        again = await pop_until(consumer, 3, 20, invisible_ms=60_000)
        assert [(p.body, p.attempt) for p in again] == [(b"m0", 2), (b"m1", 2), (b"m2", 2)]
        await taken_over_with(broker.pop, broker, table)

        assert await consumer.pop(T, queue_id=0, max_nums=32, order=True, poll_ms=1000) == []
        # the redelivery's handle is the new leader's: changed, the lending runs out soon
        assert (await consumer.change_invisible(T, again[0], 200)).code == ResponseCode.SUCCESS
        third = await pop_until(consumer, 3, 20, invisible_ms=60_000)
        assert [(p.body, p.attempt) for p in third] == [(b"m0", 3), (b"m1", 3), (b"m2", 3)]


async def test_an_ack_before_the_first_pop_of_a_member_taking_over_holds(tmp_path: Path) -> None:
    """A lending the member took over from a checkpoint and acked before it popped that queue: the next
    pop starts at the offset table's watermark, below it, and must not lend it again."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 2)
        table = table_of_before(broker)
        lent = await consumer.pop(T, queue_id=0, max_nums=2, invisible_ms=60_000)
        assert (await consumer.change_invisible(T, lent[0], 60_000)).code == ResponseCode.SUCCESS
        await taken_over_with(broker.pop, broker, table)
        assert (await consumer.ack(T, lent[0])).code == ResponseCode.SUCCESS
        again = await consumer.pop(T, queue_id=0, max_nums=32, invisible_ms=60_000)
        assert [p.body for p in again] == [b"m1"]  # lent again at once: its pop was not logged


def revive_records_fail_after_a_copy_into(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, topic: str
) -> None:
    """A failover right after a copy into `topic` was held: no revive record is stored after it."""
    put = broker.put
    pop = broker.pop
    put_record = pop._put_record
    copied = False

    async def watched_put(msg: Message) -> PutResult:
        nonlocal copied
        result = await put(msg)
        copied = copied or msg.topic == topic
        return result

    def refused(record: object) -> PutResult:
        if copied:
            raise PopError(ResponseCode.SYSTEM_ERROR, "not held: the leadership is lost")
        return put_record(record)  # type: ignore[arg-type]

    monkeypatch.setattr(broker, "put", watched_put)
    monkeypatch.setattr(pop, "_put_record", refused)


async def test_a_fifo_message_whose_dlq_copy_is_the_last_thing_held_is_not_lent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO message past its retries goes to the DLQ; the leader is lost right after the copy is held.
    The member taking over (with the table of before) lends it no more and does not copy it again."""
    from store.models import SubscriptionGroupConfig

    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        broker.groups.put(SubscriptionGroupConfig(G, retry_max_times=0))  # one delivery, then the DLQ
        await on.create_topic(T, 1)
        for body in (b"a0", b"a1"):
            assert (await on.send(T, body, queue_id=0)).code == 0
        consumer = PopClient(on, G)
        table = table_of_before(broker)
        [a0] = await consumer.pop(T, queue_id=0, max_nums=1, order=True, invisible_ms=200)
        assert a0.body == b"a0"
        revive_records_fail_after_a_copy_into(broker, monkeypatch, DLQ)
        await asyncio.sleep(0.3)
        # a pop runs the lending out: a0 to the DLQ, then a1 lent (its checkpoint refused: not answered)
        await consumer.pop(T, queue_id=0, max_nums=1, order=True, invisible_ms=60_000)
        assert broker.store.get_max_offset(DLQ, 0) == 1
        monkeypatch.undo()

        await taken_over_with(broker.pop, broker, table)
        again = await consumer.pop(T, queue_id=0, max_nums=32, order=True, invisible_ms=60_000)
        assert [p.body for p in again] == [b"a1"]
        await asyncio.sleep(1.5)  # the revive loop's check of the copy ran
        assert broker.store.get_max_offset(DLQ, 0) == 1


async def test_a_dlq_copy_logged_and_not_stored_is_put_by_the_member_taking_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader is lost after the end of a FIFO lending past its retries is logged and before its DLQ
    copy is stored: the member taking over lends it no more and puts the copy itself, once."""
    from store.models import SubscriptionGroupConfig

    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        broker.groups.put(SubscriptionGroupConfig(G, retry_max_times=0))
        await on.create_topic(T, 1)
        for body in (b"a0", b"a1"):
            assert (await on.send(T, body, queue_id=0)).code == 0
        consumer = PopClient(on, G)
        table = table_of_before(broker)
        lent = await consumer.pop(T, queue_id=0, max_nums=1, order=True, invisible_ms=200)
        assert [p.body for p in lent] == [b"a0"]
        put = broker.put

        async def no_dlq(msg: Message) -> PutResult:
            if msg.topic == DLQ:
                raise PopError(ResponseCode.SYSTEM_ERROR, "not held: the leadership is lost")
            return await put(msg)

        monkeypatch.setattr(broker, "put", no_dlq)
        await asyncio.sleep(0.3)
        assert await consumer.pop(T, queue_id=0, max_nums=1, order=True, invisible_ms=60_000) == []
        monkeypatch.undo()
        assert broker.topics.get(DLQ) is not None and broker.store.get_max_offset(DLQ, 0) == 0

        await taken_over_with(broker.pop, broker, table)
        again = await consumer.pop(T, queue_id=0, max_nums=32, order=True, invisible_ms=60_000)
        assert [p.body for p in again] == [b"a1"]
        await wait_until(lambda: broker.store.get_max_offset(DLQ, 0) == 1, 10)
        [copy] = broker.store.get_messages(G, DLQ, 0, 0, 1).messages
        assert copy.message.body == b"a0"
        await asyncio.sleep(1.5)  # the revive loop turned again: copied once
        assert broker.store.get_max_offset(DLQ, 0) == 1


async def test_a_revive_whose_retry_copy_is_the_last_thing_held_is_delivered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lending ran out and was revived into the retry topic; the leader is lost right after the copy
    is held. The member taking over lends the original no more: the retry copy is its next delivery."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        await on.create_topic(T, 1)
        assert (await on.send(T, b"r0", queue_id=0)).code == 0
        consumer = PopClient(on, G)
        table = table_of_before(broker)
        lent = await consumer.pop(T, queue_id=0, max_nums=1, invisible_ms=200)
        assert [p.body for p in lent] == [b"r0"]
        revive_records_fail_after_a_copy_into(broker, monkeypatch, RETRY)
        await wait_until(
            lambda: broker.topics.get(RETRY) is not None and broker.store.get_max_offset(RETRY, 0) == 1, 10
        )
        await asyncio.sleep(0.2)
        monkeypatch.undo()

        await taken_over_with(broker.pop, broker, table)
        got: list[Popped] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            got += await consumer.pop(T, max_nums=32, invisible_ms=60_000, poll_ms=500)
        assert [(p.body, p.attempt, p.handle.split(" ")[4]) for p in got] == [(b"r0", 2, "1")]  # the copy
        assert broker.store.get_max_offset(RETRY, 0) == 1


@pytest.mark.parametrize("limit", [None, 8])
async def test_a_pop_reads_on_past_the_messages_acked_on_an_earlier_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int | None
) -> None:
    """Forty messages lent and acked on the old leader after the table a follower took: the member taking
    over skips them by their ack records. With nothing more arriving (the producers stopped), a pop reads
    on past them to what waits above and lends it at once, rather than parking for arrivals that do not
    come: each receive would otherwise pass a batch of acked messages and give nothing. (With a smaller
    limit of offsets passed at a time, the pop yields between its reads and still does not park.)"""
    if limit is not None:
        monkeypatch.setattr(pop_module, "READ_ON_LIMIT", limit)
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 44)
        table = table_of_before(broker)
        lent = await consumer.pop(T, queue_id=0, max_nums=32, invisible_ms=60_000)
        lent += await consumer.pop(T, queue_id=0, max_nums=8, invisible_ms=60_000)
        assert len(lent) == 40
        for p in lent:
            assert (await consumer.ack(T, p)).code == ResponseCode.SUCCESS
        await taken_over_with(broker.pop, broker, table)

        got = await consumer.pop(T, queue_id=0, max_nums=4, invisible_ms=60_000, poll_ms=1000)
        assert [p.body for p in got] == [b"m40", b"m41", b"m42", b"m43"]


@pytest.mark.slow
async def test_an_ack_moves_the_offset_table_only_once_held_and_one_not_held_is_lent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower takes the leader's offset table, and lends again from it when elected: the watermark
    passes an acked message only once the quorum holds the ack's record. An ack not held (a cut off
    leader's: its client told it failed) leaves the table below the message (a member taking over with
    it lends the message again), and the lending stands: lent again when it runs out."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 2)
        lent = await consumer.pop(T, queue_id=0, max_nums=2, invisible_ms=2000)
        assert [p.body for p in lent] == [b"m0", b"m1"]
        assert (await consumer.ack(T, lent[1])).code == ResponseCode.SUCCESS
        held = broker.held
        asked: list[PutResult] = []
        cut_off = asyncio.Event()

        async def not_held(result: PutResult) -> PutResult:
            asked.append(result)
            await cut_off.wait()
            return PutResult(PutMessageStatus.OS_PAGECACHE_BUSY)

        monkeypatch.setattr(broker, "held", not_held)
        acking = asyncio.ensure_future(consumer.ack(T, lent[0]))
        await wait_until(lambda: bool(asked))
        assert broker.offsets.query_offset(G, T, 0) == 0  # what a follower takes meanwhile
        cut_off.set()
        assert (await acking).code == ResponseCode.SYSTEM_ERROR
        assert broker.offsets.query_offset(G, T, 0) == 0
        monkeypatch.setattr(broker, "held", held)
        again = await pop_until_any(consumer, 20)
        assert [p.body for p in again] == [b"m0"]  # lent again when it runs out
        assert (await consumer.ack(T, again[0])).code == ResponseCode.SUCCESS
        await wait_until(lambda: broker.offsets.query_offset(G, T, 0) == 2)


@pytest.mark.slow
async def test_a_fifo_ack_not_held_puts_no_lending_back_behind_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ack released the FIFO queue's order at once and the next message went out while its record
    waited: an ack not held leaves that lending ended (back, it would come after the next one and lend
    that one twice)."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 2)
        [first] = await consumer.pop(T, queue_id=0, max_nums=1, order=True, invisible_ms=1000)
        assert first.body == b"m0"
        held = broker.held
        asked: list[PutResult] = []
        cut_off = asyncio.Event()

        async def not_held(result: PutResult) -> PutResult:  # the ack's wait runs out; the next ones hold
            if asked:
                return await held(result)
            asked.append(result)
            await cut_off.wait()
            return PutResult(PutMessageStatus.OS_PAGECACHE_BUSY)

        monkeypatch.setattr(broker, "held", not_held)
        acking = asyncio.ensure_future(consumer.ack(T, first))
        await wait_until(lambda: bool(asked))
        nxt = await pop_until(consumer, 1, 20, invisible_ms=60_000)
        assert [p.body for p in nxt] == [b"m1"]
        cut_off.set()
        assert (await acking).code == ResponseCode.SYSTEM_ERROR
        await asyncio.sleep(2)  # past m0's lending: had it come back, it would be due
        assert await consumer.pop(T, queue_id=0, max_nums=32, order=True, poll_ms=500) == []


async def pop_until_any(consumer: PopClient, seconds: float) -> list[Popped]:
    """Pops of topic T (and its retry topic) until one lends something (or `seconds` passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = await consumer.pop(T, max_nums=32, invisible_ms=60_000, poll_ms=500)
        if got:
            return got
    return []
