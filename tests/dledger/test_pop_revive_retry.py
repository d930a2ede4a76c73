"""The revive of an expired POP lending in a DLedger group (a group of one, in this process): its copy
into the retry topic is awaited until the quorum holds it, so the revive may wait, fail and be retried.
Meanwhile the lending is over for its consumer, and a retry never puts a second copy: two copies of one
message are two consumers holding it at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.remoting.client import RemotingClient
from store.message import Message
from store.results import PutMessageStatus, PutResult
from tests.dledger.test_pop_revive_read import leader_of_one
from tests.support.broker import BrokerClient
from tests.support.pop import PopClient, Popped, first_put_answered
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

T = "RevRetry"
G = "GRevRetry"
RETRY = f"%RETRY%{G}"
#: 5.x NO_MESSAGE: a handle that is no longer the message's current one.
NO_MESSAGE = 208


def copies(broker: Broker) -> int:
    """Messages in the group's retry topic, over its queues."""
    config = broker.topics.get(RETRY)
    if config is None:
        return 0
    return sum(broker.store.get_max_offset(RETRY, q) for q in range(config.write_queue_nums))


async def lend_one(on: BrokerClient) -> tuple[PopClient, Popped]:
    """One message sent and popped for a second: its revive begins a second later."""
    await on.create_topic(T, 1)
    assert (await on.send(T, b"m0", queue_id=0)).code == 0
    consumer = PopClient(on, G)
    [lent] = await consumer.pop(T, max_nums=1, invisible_ms=1_000)
    return consumer, lent


async def test_a_revive_retried_after_its_copy_was_not_seen_held_puts_no_second_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy appended, its wait for the quorum ran out (WAIT_QUORUM_ACK_TIMEOUT answers a put
    OS_PAGECACHE_BUSY): the entry is in the leader's log and commits later. The retry waits for that
    copy again; a second put was a second copy, lent to another consumer beside the first (5.x's revive
    counts a copy once it is appended)."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer, lent = await lend_one(on)
        puts = first_put_answered(broker, monkeypatch, PutMessageStatus.OS_PAGECACHE_BUSY)
        await wait_until(lambda: not broker.pop.in_flight(), 30)
        assert puts == [RETRY]
        assert copies(broker) == 1
        again = await consumer.pop(T, max_nums=32, invisible_ms=60_000)
        assert [p.body for p in again] == [b"m0"] and again[0].reconsume_times == 1
        assert (await consumer.ack(T, lent)).code == NO_MESSAGE


async def test_a_lending_whose_revive_began_is_neither_changed_nor_acked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revive logged the lending's end and waits for its copy: a change of invisibility answered OK
    now would keep the message from its consumer's peers while the copy is lent to one of them, and an
    ack answered OK would be followed by the copy's delivery. Both are answered NO_MESSAGE, as for a
    lending that expired into a redelivery."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        consumer, lent = await lend_one(on)
        put = broker.put
        waiting = asyncio.Event()
        release = asyncio.Event()

        async def slow_quorum(msg: Message) -> PutResult:
            waiting.set()
            await release.wait()
            return await put(msg)

        monkeypatch.setattr(broker, "put", slow_quorum)
        await asyncio.wait_for(waiting.wait(), 30)
        assert (await consumer.change_invisible(T, lent, 60_000)).code == NO_MESSAGE
        assert (await consumer.ack(T, lent)).code == NO_MESSAGE
        release.set()
        await wait_until(lambda: not broker.pop.in_flight(), 30)
        assert copies(broker) == 1
        again = await consumer.pop(T, max_nums=32, invisible_ms=60_000)
        assert [p.body for p in again] == [b"m0"]
        assert (await consumer.ack(T, again[0])).code == 0
