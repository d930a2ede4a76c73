"""The remoting POP codes under attack: a batch ack whose bit set names millions of offsets."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

from daemon.broker.pop import ReceiptHandle
from daemon.remoting.codes import RequestCode, ResponseCode
from tests.support.broker import BrokerHandle
from tests.support.pop import PopClient
from tests.support.waiting import wait_until

T = "PopAttackTopic"


async def test_a_batch_ack_naming_more_than_one_pop_is_refused_at_once(broker: BrokerHandle) -> None:
    """One BatchAck is one pop's checkpoint (at most 32 messages): a bit set of 2M offsets is refused
    without walking it, and the lent messages stay lent."""
    await broker.create_topic(T, 1)
    for i in range(4):
        assert (await broker.send(T, f"m{i}".encode(), queue_id=0)).code == 0
    c = PopClient(broker, "GX")
    got = await c.pop(T, max_nums=4)
    h = ReceiptHandle.decode(got[0].handle)
    ack = {"c": "GX", "t": T, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": h.pop_time, "it": h.invisible_ms}
    ack["b"] = base64.b64encode(b"\xff" * (1 << 18)).decode()
    body = json.dumps({"brokerName": "broker-a", "acks": [ack]}).encode()
    started = time.monotonic()
    r = await broker.call(RequestCode.BATCH_ACK_MESSAGE, body=body)
    assert time.monotonic() - started < 1.0
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "32" in (r.remark or "")
    assert broker.broker.pop.in_flight() == {"GX": 4}


async def test_a_batch_ack_naming_too_many_offsets_in_all_is_refused(broker: BrokerHandle) -> None:
    await broker.create_topic(T, 1)
    ack = {"c": "GY", "t": T, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1, "it": 1}
    ack["b"] = base64.b64encode(b"\xff" * 4).decode()  # 32 offsets: one pop's worth
    body = json.dumps({"brokerName": "broker-a", "acks": [ack] * 2000}).encode()
    r = await broker.call(RequestCode.BATCH_ACK_MESSAGE, body=body)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "offsets" in (r.remark or "")


async def test_a_negative_or_endless_invisible_time_is_refused(broker: BrokerHandle) -> None:
    """A lending below zero would come back at once (and climb to the DLQ), one of 2^62 ms never."""
    await broker.create_topic(T, 1)
    assert (await broker.send(T, b"m", queue_id=0)).code == 0
    c = PopClient(broker, "GI")
    for invisible in (-1, 12 * 3600 * 1000 + 1, 2**62):
        r = await c.pop_raw(T, invisible_ms=invisible)
        assert r.code == 29 and "invisibleTime" in (r.remark or ""), (invisible, r.code)  # INVALID_PARAMETER
    (got,) = await c.pop(T, invisible_ms=60_000)
    for invisible in (-5, 2**62):
        assert (await c.change_invisible(T, got, invisible)).code == 29
    assert (await c.ack(T, got)).code == 0  # the lending is untouched


async def test_a_held_pop_of_every_queue_parks_once_for_its_topic(broker: BrokerHandle) -> None:
    """A pop of queue -1 waiting for messages parks once for the topic, as 5.x parks it (and once for the
    group's retry topic), however many queues the topic has; a message on any queue still wakes it at once.
    It parked a future, a timer and a callback on each queue: a held pop's cost and memory grew with the
    topic's queue count (a thousand queues, a thousand of each, every held pop)."""
    queues = 256
    await broker.create_topic(T, queues)
    hold = broker.broker.hold
    c = PopClient(broker, "GHeld")
    assert await c.pop(T) == []  # (the group's first pass: the queues' ends learnt)
    waiting = asyncio.create_task(c.pop(T, poll_ms=20_000))
    await wait_until(lambda: hold.parked > 0)
    assert hold.parked <= 2, hold.parked  # (the topic; the retry topic, once the group has one)
    assert (await broker.send(T, b"late", queue_id=queues - 7)).code == 0
    (got,) = await asyncio.wait_for(waiting, 10)
    assert (got.message.queue_id, got.message.body) == (queues - 7, b"late")
    assert hold.parked == 0


@pytest.mark.pure_python
async def test_a_pop_reads_no_queue_it_read_to_the_end_with_nothing_since(
    broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pop of queue -1 passes every queue of its topic: one it read to its end, with nothing put since,
    is passed by its offsets alone, without a read of the store (each read of an empty queue cost more than
    the rest of its pass); a queue that grew is read."""
    queues = 64
    await broker.create_topic(T, queues)
    store = broker.broker.store
    reads: list[tuple[str, int]] = []
    real = store.get_messages

    def counted(group: str, topic: str, queue_id: int, *args: object, **kw: object) -> object:
        reads.append((topic, queue_id))
        return real(group, topic, queue_id, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "get_messages", counted)
    c = PopClient(broker, "GPass")
    assert await c.pop(T) == []
    assert len([r for r in reads if r[0] == T]) == queues  # the first pass reads each: its start is learnt
    reads.clear()
    assert await c.pop(T) == []
    assert [r for r in reads if r[0] == T] == []
    assert (await broker.send(T, b"new", queue_id=5)).code == 0
    (got,) = await c.pop(T)
    assert got.message.queue_id == 5 and [r for r in reads if r[0] == T] == [(T, 5)]
