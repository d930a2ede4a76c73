"""Work a DLedger member's POP service began in one leadership and ends in the next (the member stopped
leading and was elected again while it waited): it touches nothing of the next leadership's tables. An
ack's settle would count down the next leadership's ack of the same message (its watermark passing a
message whose ack record is not held) or put its own lending back there; a revive would free the next
leadership's refused handle and put a second copy; a catch-up would read on into tables another one
rebuilt. A group of one in this process, its quorum's answers in the test's hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.broker import pop as pop_module
from daemon.broker.broker import Broker
from daemon.broker.pop import PopError
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import ResponseCode
from store.names import REVIVE_GROUP
from store.results import PutMessageStatus, PutResult
from tests.dledger.test_pop_revive_read import leader_of_one
from tests.dledger.test_pop_takeover import DLQ, G, T, sent, taken_over_with
from tests.support.waiting import wait_until


class Quorum:
    """``broker.held`` in the test's hand: while ``holding``, each wait stays until the test answers it
    (True: held, as the real wait says; False: not held)."""

    def __init__(self, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = broker.held
        self.waits: list[asyncio.Future[bool]] = []
        self.holding = False
        monkeypatch.setattr(broker, "held", self.held)

    async def held(self, result: PutResult) -> PutResult:
        if not self.holding:
            return await self.real(result)
        verdict: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waits.append(verdict)
        if await verdict:
            return await self.real(result)
        return PutResult(PutMessageStatus.OS_PAGECACHE_BUSY)


async def elected_again(broker: Broker) -> None:
    """The leadership ended and begun again, the records logged so far not in the log the member reads
    (as when they were in a deposed leader's set-aside tail), the table at the first message."""
    pop = broker.pop
    end = broker.store.get_max_offset(pop.revive_topic, 0)
    await taken_over_with(pop, broker, [((G, T, 0), 0), ((REVIVE_GROUP, pop.revive_topic, 0), end)])


@pytest.mark.parametrize("held", [False, True])
async def test_an_ack_settled_after_a_take_over_leaves_the_next_leaderships_ack_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """m0 acked, its record waiting for the quorum; the member leads again and lends m0 again, and that
    ack waits too. The first one's answer comes: its caller gets it, and the next leadership's watermark
    stays below m0 (its own ack not held yet) with no old lending put back; its own ack held, it moves."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 2)
        lent = await consumer.pop(T, queue_id=0, max_nums=2, invisible_ms=60_000)
        assert [p.body for p in lent] == [b"m0", b"m1"]
        quorum = Quorum(broker, monkeypatch)
        quorum.holding = True
        old_ack = asyncio.ensure_future(consumer.ack(T, lent[0]))
        await wait_until(lambda: len(quorum.waits) == 1)
        await elected_again(broker)
        again = await consumer.pop(T, queue_id=0, max_nums=2, invisible_ms=60_000)
        assert [p.body for p in again] == [b"m0", b"m1"]
        new_ack = asyncio.ensure_future(consumer.ack(T, again[0]))
        await wait_until(lambda: len(quorum.waits) == 2)

        quorum.waits[0].set_result(held)
        expected = ResponseCode.SUCCESS if held else ResponseCode.SYSTEM_ERROR
        assert (await old_ack).code == expected
        assert broker.offsets.query_offset(G, T, 0) == 0
        assert (G, T, 0, 0) not in broker.pop.records
        quorum.waits[1].set_result(True)
        assert (await new_ack).code == ResponseCode.SUCCESS
        assert broker.offsets.query_offset(G, T, 0) == 1  # (m1 still lent)
        assert (G, T, 0, 0) not in broker.pop.records


async def test_a_forward_ended_after_a_take_over_neither_copies_nor_frees_the_next_leaderships_handle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """m0 forwarded to the DLQ, the end of its lending waiting for the quorum; the member leads again, lends
    m0 again and forwards it too. The first forward's wait is answered: it fails, puts no copy, and the
    next leadership's forward keeps m0's handle refused until it put the one copy."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 1)
        [old] = await consumer.pop(T, queue_id=0, max_nums=1, invisible_ms=60_000)
        pop = broker.pop
        quorum = Quorum(broker, monkeypatch)
        quorum.holding = True
        old_forward = asyncio.ensure_future(pop.forward_to_dlq(group=G, topic=T, receipt_handle=old.handle))
        await wait_until(lambda: len(quorum.waits) == 1)
        await elected_again(broker)
        [again] = await consumer.pop(T, queue_id=0, max_nums=1, invisible_ms=60_000)
        assert again.body == b"m0"
        new_forward = asyncio.ensure_future(pop.forward_to_dlq(group=G, topic=T, receipt_handle=again.handle))
        await wait_until(lambda: len(quorum.waits) == 2)

        quorum.holding = False  # (what the first forward waits for next is answered at once)
        quorum.waits[0].set_result(True)
        with pytest.raises(PopError):
            await old_forward
        assert broker.store.get_max_offset(DLQ, 0) == 0
        assert (await consumer.ack(T, again)).code == pop_module.NO_MESSAGE  # its copy is on its way
        quorum.waits[1].set_result(True)
        await new_forward
        assert broker.store.get_max_offset(DLQ, 0) == 1
        assert pop.in_flight() == {}


async def test_a_catch_up_cut_short_by_a_take_over_reads_nothing_into_the_next_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three acks logged above the unacked m0; the member elected reads them one at a time and stops
    leading after the first: the rest is not read into the tables the take-over emptied."""
    monkeypatch.setattr(pop_module, "CATCH_UP_BATCH", 1)
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer = await sent(on, 4)
        lent = await consumer.pop(T, queue_id=0, max_nums=4, invisible_ms=60_000)
        for p in lent[1:]:
            assert (await consumer.ack(T, p)).code == ResponseCode.SUCCESS
        pop = broker.pop
        await pop.stop()
        pop.take_over()
        reading = asyncio.ensure_future(pop.catch_up())
        while not pop._acked:
            await asyncio.sleep(0)
        pop.take_over()  # the leadership lost again
        await reading
        assert pop._acked == {} and not pop._logged


async def test_a_fifo_pop_whose_leadership_ended_while_it_forwarded_a_dead_lending_lends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO pop of both queues finds queue 0's lending past its retries (to the DLQ first) and lends
    queue 1's b0; the leadership ends while the DLQ copy's record waits. Answered b0, that lending would
    be logged in the next leadership's log beside its own lending of b0: two consumers holding it."""
    from store.models import SubscriptionGroupConfig

    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        broker.groups.put(SubscriptionGroupConfig(G, retry_max_times=0))  # one delivery, then the DLQ
        await on.create_topic(T, 2)
        for body, queue in ((b"a0", 0), (b"b0", 1)):
            assert (await on.send(T, body, queue_id=queue)).code == 0
        pop = broker.pop
        fifo = {"group": G, "topic": T, "invisible_ms": 60_000, "poll_ms": 0, "fifo": True}
        fifo |= {"expression_type": "TAG", "expression": "*", "max_messages": 32}
        [a0] = await pop.pop(queue_id=0, **{**fifo, "invisible_ms": 200})  # type: ignore[arg-type]
        assert (a0.queue_id, a0.queue_offset) == (0, 0)
        await asyncio.sleep(0.3)
        quorum = Quorum(broker, monkeypatch)
        quorum.holding = True
        popping = asyncio.ensure_future(pop.pop(queue_id=-1, **fifo))  # type: ignore[arg-type]
        await wait_until(lambda: len(quorum.waits) == 1)  # a0's end logged, waiting
        end = broker.store.get_max_offset(pop.revive_topic, 0)
        table = [((G, T, 0), 0), ((G, T, 1), 0), ((REVIVE_GROUP, pop.revive_topic, 0), end)]
        await taken_over_with(pop, broker, table)
        quorum.holding = False
        quorum.waits[0].set_result(True)
        with pytest.raises(PopError):
            await popping
        again = await pop.pop(queue_id=1, **fifo)  # type: ignore[arg-type]
        assert [(m.queue_id, m.queue_offset) for m in again] == [(1, 0)]
