"""What a DLedger member taking over reads of the POP revive records (a group of one, in this process:
its POP service stopped and taken over as an elected member's is): acks and changes held, and the
records it must not take at their word (a message it does not hold, a duplicate, an unreadable body,
a change whose lending ran out)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.broker import pop as pop_module
from daemon.broker.broker import Broker
from daemon.broker.pop import ACK_TAG, PopService
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store.message import PROPERTY_TAGS, Message
from store.names import REVIVE_GROUP
from tests.dledger.test_single import dledger_keys
from tests.support.broker import BrokerClient, start_broker
from tests.support.pop import PopClient, Popped
from tests.support.waiting import wait_until

T = "RevRead"
G = "GRevRead"


@contextlib.asynccontextmanager
async def leader_of_one(tmp_path: Path, client: RemotingClient) -> AsyncIterator[tuple[Broker, BrokerClient]]:
    """A DLedger group of one in this process, elected: its broker, and `client` on it."""
    broker = await start_broker(tmp_path / "store", **dledger_keys())
    try:
        await wait_until(lambda: broker.config.broker_role == "SYNC_MASTER")
        yield broker, BrokerClient(broker.addr, client)
    finally:
        await broker.stop()


async def taken_over(pop: PopService) -> None:
    """The POP service stopped and started again as a member elected leader starts it."""
    await pop.stop()
    pop.take_over()
    await pop.catch_up()
    pop.start()


def revive_records(broker: Broker, start: int) -> list[tuple[str | None, dict[str, Any]]]:
    """The revive records from queue offset `start` on: (tag, body)."""
    found = broker.store.get_messages(REVIVE_GROUP, broker.pop.revive_topic, 0, start, 32).messages
    return [(r.message.properties.get(PROPERTY_TAGS), json.loads(r.message.body)) for r in found]


def forged_ack(topic: str, group: str, offset: int) -> Message:
    body = json.dumps({"ao": offset, "so": 0, "c": group, "t": T, "q": 0, "pt": 1, "bn": "broker-a"})
    return Message(topic, body.encode(), properties={PROPERTY_TAGS: ACK_TAG}, wait_store_msg_ok=False)


async def test_a_member_taking_over_lends_what_the_records_leave_and_nothing_they_do_not_prove(
    tmp_path: Path,
) -> None:
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        await on.create_topic(T, 1)
        for i in range(6):
            assert (await on.send(T, f"m{i}".encode(), queue_id=0)).code == 0
        consumer = PopClient(on, G)
        lent = {p.body: p for p in await consumer.pop(T, max_nums=6, invisible_ms=60_000)}
        assert len(lent) == 6
        for body in (b"m1", b"m3"):  # above the unacked m0 and m2: no watermark covers them
            assert (await consumer.ack(T, lent[body])).code == 0
        changed: Popped = lent[b"m4"]
        assert (await consumer.change_invisible(T, changed, 8_000)).code == 0  # runs out after the take-over
        pop = broker.pop
        revive = pop.revive_topic
        store = broker.store
        await pop.stop()  # leadership lost: its POP state dropped
        assert pop.in_flight() == {}
        # an ack of m3 twice, one of offset 6 (not held yet: a later m6 must still be lent), garbage
        for msg in (
            forged_ack(revive, G, 3),
            forged_ack(revive, G, 6),
            Message(revive, b"{", properties={PROPERTY_TAGS: ACK_TAG}, wait_store_msg_ok=False),
        ):
            assert (await broker.put(msg)).ok
        pop.take_over()
        await pop.catch_up()
        pop.start()
        assert (await on.send(T, b"m6", queue_id=0)).code == 0

        again = await consumer.pop(T, max_nums=32, invisible_ms=60_000)
        assert sorted(p.body for p in again) == [b"m0", b"m2", b"m5", b"m6"]
        # the change held: m4 stays lent until its 8 s ran out, then goes to the retry topic once
        retry = f"%RETRY%{G}"

        def revived() -> bool:
            return store.get_max_offset(retry, 0) >= 1 if broker.topics.get(retry) else False

        await wait_until(revived, 30)
        for p in again:
            assert (await consumer.ack(T, p)).code == 0
        deadline = time.monotonic() + 10
        back: list[Popped] = []
        while not back and time.monotonic() < deadline:
            back = await consumer.pop(T, max_nums=32, invisible_ms=60_000, poll_ms=500)
        assert [p.body for p in back] == [b"m4"]
        assert (await consumer.ack(T, back[0])).code == 0
        assert store.get_max_offset(retry, 0) == 1
        # every record concerns a message below its queue's watermark now: the revive offset is the end
        end = store.get_max_offset(revive, 0)
        assert broker.offsets.query_offset(REVIVE_GROUP, revive, 0) == end
        # the revive topic has no topic config (never routed), and CLEAN_UNUSED_TOPIC keeps it
        cleaned = await client.invoke(broker.addr, RemotingCommand.request(RequestCode.CLEAN_UNUSED_TOPIC))
        assert cleaned.code == ResponseCode.SUCCESS
        assert broker.topics.get(revive) is None and store.get_max_offset(revive, 0) == end > 0
        # nor does a start give it one (as to a topic whose config was lost): it would be routed
        assert broker.topics.recreate_lost_topics(store.topic_queue_table()) == []


async def test_a_needed_record_far_behind_is_logged_again_so_the_revive_offset_moves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ack above a message still lent is needed as long as that lending lasts; with acks of another
    queue behind it (superseded at once) it is logged again at the end, the revive offset passes it,
    and a member taking over still knows the ack. The revive offset passes the old record only once the
    group holds the new one: a failover in between must not leave the next leader's offset (taken with
    the offset table) past a record its log lacks."""
    monkeypatch.setattr(pop_module, "RELOG_LAG", 3)
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        assert broker.dledger is not None
        raft_log = broker.dledger.log
        commit = broker.offsets.commit_offset
        moves: list[tuple[int, int, int]] = []  # (revive offset, committed index, last index) at each move

        def watched(group: str, topic: str, queue_id: int, offset: int) -> None:
            if group == REVIVE_GROUP:
                moves.append((offset, raft_log.committed_index, raft_log.last_index))
            commit(group, topic, queue_id, offset)

        monkeypatch.setattr(broker.offsets, "commit_offset", watched)
        await on.create_topic(T, 2)
        for body, queue in [(b"x0", 0), (b"x1", 0)] + [(f"y{i}".encode(), 1) for i in range(10)]:
            assert (await on.send(T, body, queue_id=queue)).code == 0
        consumer = PopClient(on, G)
        held = await consumer.pop(T, queue_id=0, max_nums=2, invisible_ms=60_000)
        others = await consumer.pop(T, queue_id=1, max_nums=10, invisible_ms=60_000)
        assert [p.body for p in held] == [b"x0", b"x1"] and len(others) == 10
        assert (await consumer.ack(T, held[1])).code == 0  # needed while x0 is lent
        for p in others:  # in order: each superseded once acked
            assert (await consumer.ack(T, p)).code == 0
        pop = broker.pop
        revive = pop.revive_topic
        end = broker.store.get_max_offset(revive, 0)
        assert 11 < end <= 11 + 4  # the acks, and x1's again each time it was 3 records behind
        assert broker.offsets.query_offset(REVIVE_GROUP, revive, 0) > 0  # past x1's first record
        # x1's first ack is the first record: whenever the offset stood past it, the log held all it had
        # (nothing else is appended meanwhile), the ack logged again included
        assert [m for m in moves if m[0] > 0 and m[1] < m[2]] == []
        await taken_over(pop)
        again = await consumer.pop(T, max_nums=32, invisible_ms=60_000)
        assert [p.body for p in again] == [b"x0"]


async def test_a_fifo_message_sent_to_the_dlq_inside_a_pop_is_not_lent_again_by_a_member_taking_over(
    tmp_path: Path,
) -> None:
    """A FIFO message past its retries goes to the DLQ inside a pop. A member taking over with the offset
    table of before (followers take it every 10 s) must not lend it again: the end of its lending is
    logged as an ack, as 5.x acks a message it forwarded to the DLQ. One of the two had its lending
    changed, so a checkpoint record of it is in the log too."""
    from store.models import SubscriptionGroupConfig

    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        broker.groups.put(SubscriptionGroupConfig(G, retry_max_times=1))  # 2 deliveries, then the DLQ
        await on.create_topic(T, 2)
        for body, queue in [(b"a0", 0), (b"a1", 0), (b"b0", 1), (b"b1", 1)]:
            assert (await on.send(T, body, queue_id=queue)).code == 0
        consumer = PopClient(on, G)
        [a0] = await consumer.pop(T, queue_id=0, max_nums=1, order=True, invisible_ms=60_000)
        assert (await consumer.change_invisible(T, a0, 300)).code == 0  # its checkpoint logged
        [b0] = await consumer.pop(T, queue_id=1, max_nums=1, order=True, invisible_ms=300)
        assert (a0.body, b0.body) == (b"a0", b"b0")
        pop = broker.pop
        revive = pop.revive_topic
        offsets = broker.offsets
        # the table as a follower took it now: both queues at their first message
        taken = [(G, T, 0), (G, T, 1), (REVIVE_GROUP, revive, 0)]
        before = [offsets.query_offset(*key) for key in taken]
        assert before[:2] == [0, 0]

        for queue, nxt in ((0, b"a1"), (1, b"b1")):  # redelivered once, then to the DLQ: the next comes
            seen: list[bytes] = []
            deadline = time.monotonic() + 20
            while nxt not in seen:
                assert time.monotonic() < deadline, seen
                got = await consumer.pop(
                    T, queue_id=queue, max_nums=1, order=True, invisible_ms=300, poll_ms=500
                )
                seen += [p.body for p in got]
            assert seen == [nxt[:1] + b"0", nxt], seen
        dlq = f"%DLQ%{G}"
        await wait_until(lambda: broker.store.get_max_offset(dlq, 0) == 2, 10)

        await pop.stop()
        for key, offset in zip(taken, before, strict=True):
            offsets.commit_offset(*key, offset)
        pop.take_over()
        await pop.catch_up()
        pop.start()
        again = []
        for queue in (0, 1):  # (a1 and b1 come back once their own 300 ms lendings, logged, ran out)
            again += [
                p.body
                for p in await consumer.pop(
                    T, queue_id=queue, max_nums=32, order=True, invisible_ms=60_000, poll_ms=2000
                )
            ]
        assert again == [b"a1", b"b1"]
        assert broker.store.get_max_offset(dlq, 0) == 2


async def test_a_batch_ack_is_one_back_record_per_queue_and_pop_and_a_member_taking_over_reads_it(
    tmp_path: Path,
) -> None:
    """BATCH_ACK_MESSAGE's offsets of one pop of one queue are logged as one 5.x ``BatchAckMsg`` (tag
    ``bAck``), held before the answer; a member taking over lends none of them again."""
    import base64

    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        await on.create_topic(T, 2)
        for i in range(8):
            assert (await on.send(T, f"m{i}".encode(), queue_id=i % 2)).code == 0
        consumer = PopClient(on, G)
        lent = await consumer.pop(T, max_nums=8, invisible_ms=60_000)
        assert len(lent) == 8
        pop = broker.pop
        revive = pop.revive_topic
        start = broker.store.get_max_offset(revive, 0)
        acks = []
        for queue in (0, 1):  # queue offsets 1, 2, 3 acked in each, 0 not
            handle = next(p.handle for p in lent if p.message.queue_id == queue).split(" ")
            acks.append(
                {
                    "c": G,
                    "t": T,
                    "r": "0",
                    "so": int(handle[0]),
                    "q": queue,
                    "rq": 0,
                    "pt": int(handle[1]),
                    "it": int(handle[2]),
                    "b": base64.b64encode(bytes([0b1110])).decode(),
                }
            )
        body = json.dumps({"brokerName": "broker-a", "acks": acks}).encode()
        assert (await on.call(RequestCode.BATCH_ACK_MESSAGE, body=body)).code == ResponseCode.SUCCESS
        assert pop.in_flight() == {G: 2}
        logged = revive_records(broker, start)
        assert [(tag, b["q"], b["aol"]) for tag, b in logged] == [
            ("bAck", 0, [1, 2, 3]),
            ("bAck", 1, [1, 2, 3]),
        ]
        await taken_over(pop)
        again = await consumer.pop(T, max_nums=32, invisible_ms=60_000)
        assert sorted(p.body for p in again) == [b"m0", b"m1"]


async def test_acks_of_one_turn_are_logged_together(tmp_path: Path) -> None:
    """Acks of separate requests handled in one turn of the loop (the requests read together) are logged
    at its end, merged per queue and pop: one ``bAck``, each request answered once it is held."""
    async with RemotingClient() as client, leader_of_one(tmp_path, client) as (broker, on):
        await on.create_topic(T, 1)
        for i in range(4):
            assert (await on.send(T, f"m{i}".encode(), queue_id=0)).code == 0
        lent = await PopClient(on, G).pop(T, max_nums=4, invisible_ms=60_000)
        assert len(lent) == 4
        pop = broker.pop
        revive = pop.revive_topic
        start = broker.store.get_max_offset(revive, 0)
        waits = [pop.log_acks([pop.ack_one(group=G, topic=T, receipt_handle=p.handle)]) for p in lent[1:]]
        for logged in waits:
            assert logged is not None
            await logged
        assert [(tag, b["aol"]) for tag, b in revive_records(broker, start)] == [("bAck", [1, 2, 3])]
        assert pop.in_flight() == {G: 1}  # m0 still lent
