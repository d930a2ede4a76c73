"""POP consumption (RocketMQ 5.x) through the remoting POP codes on our real broker."""

from __future__ import annotations

import asyncio

from daemon.broker.pop import ReceiptHandle
from tests.support.broker import BrokerHandle
from tests.support.pop import PopClient

T = "PopTopic"


async def _fill(b: BrokerHandle, n: int, queues: int = 4, topic: str = T, **options: object) -> None:
    await b.create_topic(topic, queues)
    for i in range(n):
        r = await b.send(topic, f"m{i}".encode(), queue_id=i % queues, **options)  # type: ignore[arg-type]
        assert r.code == 0, r.remark


async def test_pop_ack_and_change_invisible(broker: BrokerHandle) -> None:
    await _fill(broker, 8)
    c = PopClient(broker, "G1")
    got = await c.pop(T, max_nums=32, invisible_ms=60_000)
    assert sorted(p.body for p in got) == sorted(f"m{i}".encode() for i in range(8))
    assert {p.attempt for p in got} == {1}
    assert broker.broker.pop.in_flight() == {"G1": 8}
    # everything is out: a second pop finds nothing
    assert await c.pop(T) == []
    # a handle acks once
    first, second = got[0], got[1]
    assert (await c.ack(T, first)).code == 0
    assert (await c.ack(T, first)).code == 208
    # change-invisible: a new handle, the old one stops working
    old = second.handle
    assert (await c.change_invisible(T, second, 30_000)).code == 0
    assert second.handle != old
    stale = type(second)(second.message, old, 0)
    assert (await c.ack(T, stale)).code == 208
    assert (await c.ack(T, second)).code == 0
    assert broker.broker.pop.in_flight() == {"G1": 6}
    # the receipt handle a gRPC front gets is the same, plus the CommitLog offset
    h = ReceiptHandle.decode(got[2].handle)
    assert (h.topic_type, h.broker_name, h.revive_qid) == ("0", "broker-a", 0)
