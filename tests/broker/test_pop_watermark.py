"""What a POP group commits into the consumer offset table: the ack watermark (the lowest offset still
lent and not acked, or the pop offset when nothing is lent), never the pop offset. The table is what a
slave or another DLedger member takes from this broker, and where a member taking over starts popping."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from daemon.broker.headers import UpdateConsumerOffsetRequestHeader
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode
from store.config_files import ConsumerOffsetManager
from store.names import retry_topic
from tests.support.broker import BrokerClient, BrokerHandle, start_broker
from tests.support.pop import PopClient, Popped
from tests.support.waiting import wait_until

T = "Marks"
G = "GMark"


async def _fill(b: BrokerClient, n: int, topic: str = T) -> None:
    await b.create_topic(topic, 1)
    for i in range(n):
        assert (await b.send(topic, f"m{i}".encode(), queue_id=0)).code == 0


def committed(b: BrokerHandle, group: str = G, topic: str = T) -> int:
    return b.broker.offsets.query_offset(group, topic, 0)


async def _pop(c: PopClient, n: int, **options: object) -> list[Popped]:
    got = await c.pop(T, queue_id=0, max_nums=n, **options)  # type: ignore[arg-type]
    assert [p.message.queue_offset for p in got] == [got[0].message.queue_offset + i for i in range(len(got))]
    return got


async def test_the_table_stays_at_the_first_unacked_message(broker: BrokerHandle) -> None:
    await _fill(broker, 10)
    c = PopClient(broker, G)
    got = await _pop(c, 10)
    assert committed(broker) == 0  # all ten lent: nothing below offset 0 is done
    later = got[3:]
    random.Random(7).shuffle(later)
    for p in later:  # 3..9 acked out of order: the first unacked is still 0
        assert (await c.ack(T, p)).code == 0
        assert committed(broker) == 0
    assert (await c.ack(T, got[0])).code == 0
    assert committed(broker) == 1
    assert (await c.ack(T, got[2])).code == 0
    assert committed(broker) == 1
    assert (await c.ack(T, got[1])).code == 0
    assert committed(broker) == 10  # it jumps over everything acked meanwhile
    # the pop offset was never the table's: nothing is lent twice, nothing is left
    empty = await c.pop_raw(T, queue_id=0)
    assert empty.code == 210 and empty.ext_fields["restNum"] == "0"


async def test_a_pop_moves_the_table_only_when_nothing_is_lent(broker: BrokerHandle) -> None:
    await _fill(broker, 6)
    c = PopClient(broker, G)
    first = await _pop(c, 2)
    second = await _pop(c, 2)
    assert [p.message.queue_offset for p in second] == [2, 3]  # the pop offset is its own
    assert committed(broker) == 0
    for p in first + second:
        assert (await c.ack(T, p)).code == 0
    assert committed(broker) == 4
    assert broker.broker.pop.pop_offset(G, T, 0) == 4


async def test_a_fifo_lending_holds_the_table_too(broker: BrokerHandle) -> None:
    await _fill(broker, 4)
    c = PopClient(broker, G)
    got = await c.pop(T, queue_id=0, max_nums=3, order=True)
    assert [p.body for p in got] == [b"m0", b"m1", b"m2"]
    for p in got[1:]:
        assert (await c.ack(T, p)).code == 0
    assert committed(broker) == 0
    assert (await c.ack(T, got[0])).code == 0
    assert committed(broker) == 3


async def test_a_member_taking_over_lends_from_the_table(broker: BrokerHandle) -> None:
    """What an elected DLedger member does: its own records dropped, the next pop reads at the table's
    watermark, so the unacked messages are lent again (the acked ones above them too: duplicates)."""
    await _fill(broker, 10)
    c = PopClient(broker, G)
    got = await _pop(c, 10)
    for p in got[5:]:
        assert (await c.ack(T, p)).code == 0
    assert committed(broker) == 0
    broker.broker.pop.take_over()
    assert broker.broker.pop.in_flight() == {}
    again = await _pop(c, 10)
    assert [p.body for p in again] == [f"m{i}".encode() for i in range(10)]
    assert (await c.ack(T, got[0])).code == 208  # the older lending is gone with the records
    for p in again:
        assert (await c.ack(T, p)).code == 0
    assert committed(broker) == 10


async def test_a_restart_keeps_lendings_and_sets_the_table_to_the_watermark(tmp_path: Path) -> None:
    """The journal replayed at start: in-flight records and the pop offset come back; the table is set to
    the watermark, also when its file holds more (a pop offset committed by an older broker)."""
    b = await start_broker(tmp_path / "store")
    client = RemotingClient()
    try:
        wire = BrokerHandle(b.addr, client, b)
        await _fill(wire, 10)
        c = PopClient(wire, G)
        got = await _pop(c, 6)
        for p in got[1:]:
            assert (await c.ack(T, p)).code == 0
        assert committed(wire) == 0
        await b.stop()
        table = ConsumerOffsetManager(b.offsets.path)
        table.load()
        table.commit_offset(G, T, 0, 6)  # as an older broker left it: the pop offset
        table.persist()
        b = await start_broker(tmp_path / "store")
        wire = BrokerHandle(b.addr, client, b)
        c = PopClient(wire, G)
        assert committed(wire) == 0
        assert b.pop.in_flight() == {G: 1}
        rest = await _pop(c, 10)
        assert [p.message.queue_offset for p in rest] == [6, 7, 8, 9]
        for p in [got[0], *rest]:
            assert (await c.ack(T, p)).code == 0
        assert committed(wire) == 10
    finally:
        await client.close()
        await b.stop()


async def test_an_offset_written_by_someone_else_wins(broker: BrokerHandle) -> None:
    """An operator's reset (UPDATE_CONSUMER_OFFSET, as `mqctl offset reset` of a group with no 4.x client
    online sends it): the next pop reads there, lendings of the queue end, and the watermark does not
    pull the table back."""
    await _fill(broker, 10)
    c = PopClient(broker, G)
    got = await _pop(c, 10)

    async def reset(offset: int) -> None:
        header = UpdateConsumerOffsetRequestHeader(G, T, 0, offset)
        assert (await broker.call(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext_fields())).code == 0

    await reset(7)  # forward: 0..6 skipped as asked
    assert [p.message.queue_offset for p in await _pop(c, 10)] == [7, 8, 9]
    assert committed(broker) == 7
    assert (await c.ack(T, got[0])).code == 208
    assert broker.broker.pop.in_flight() == {G: 3}
    await reset(2)  # back: lent again from there
    again = await _pop(c, 10)
    assert [p.message.queue_offset for p in again] == list(range(2, 10))
    for p in again:
        assert (await c.ack(T, p)).code == 0
    assert committed(broker) == 10


async def test_a_revived_message_is_held_by_the_retry_queue_then(broker: BrokerHandle) -> None:
    """An expired lending is re-put into the group's retry topic: the topic's watermark passes it, and
    the retry queue's holds it until it is acked there."""
    await _fill(broker, 2)
    c = PopClient(broker, G)
    assert [p.body for p in await _pop(c, 1, invisible_ms=200)] == [b"m0"]
    assert committed(broker) == 0
    await wait_until(lambda: committed(broker) == 1, 10)  # revived: m0's copy is in the retry topic
    retry = retry_topic(G)
    got: list[Popped] = []
    while len(got) < 2:
        got += await c.pop(T, queue_id=0, max_nums=2, invisible_ms=60_000, poll_ms=500)
    again = next(p for p in got if p.body == b"m0")
    assert again.attempt == 2 and again.handle.split(" ")[4] == "1"  # lent from the retry topic
    assert (committed(broker, topic=retry), committed(broker)) == (0, 1)  # m0 and m1 lent
    assert (await c.ack(T, again)).code == 0
    assert committed(broker, topic=retry) == 1


async def test_a_dledger_member_that_stops_leading_forgets_its_lendings(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its POP service stopped on losing the leadership: a late ack reaching it finds no lending (the new
    leader lends the message again) and leaves the offset table, now the new leader's, as it is."""
    await _fill(broker, 4)
    c = PopClient(broker, G)
    got = await _pop(c, 4)
    pop = broker.broker.pop
    with monkeypatch.context() as m:  # (the service's own view: the rest of the broker stays as it is)
        m.setattr(broker.broker.config, "enable_dleger_commit_log", True)
        async with asyncio.timeout(10):  # right after a pop, which woke the revive loop
            await pop.stop()
    broker.broker.offsets.commit_offset(G, T, 0, 0)  # as the new leader's table arrives by the sync
    assert pop.in_flight() == {}
    assert (await c.ack(T, got[0])).code == 208
    assert committed(broker) == 0
    pop.start()
