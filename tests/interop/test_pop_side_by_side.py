"""A 4.x push consumer (ali-ons, group A) and a 5.x POP consumer (remoting POP codes, group B) on one
topic at the same time: each group gets every message, the POP group's redeliveries go through its own
retry topic and never reach the 4.x group, and the 4.x group's committed offsets end at the queues' end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.broker.bodies import ConsumeStats
from daemon.remoting.codes import RequestCode
from store.names import retry_topic
from tests.support.ali_ons import expected_body, node
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster
from tests.support.pop import PopClient

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "MixedTopic"
GROUP_4X = "CID_MQCTL_MIXED_4X"
GROUP_POP = "CID_MQCTL_MIXED_POP"
COUNT = 100


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterHandle]:
    handle = await start_cluster(tmp_path)
    handle.broker.topics.create_system_like(TOPIC, 4, 6)
    handle.broker.topics.create_system_like(retry_topic(GROUP_4X), 1, 6)
    await handle.broker.register_all()
    try:
        yield handle
    finally:
        await stop_cluster(handle)


async def _pop_all(c: PopClient, stop: asyncio.Event) -> list[tuple[bytes, int]]:
    """Pop until ``stop``: the first delivery of every other message is left to expire (it comes back
    from %RETRY%B), everything else is acked. Returns (body, attempt) of each acked message."""
    acked: list[tuple[bytes, int]] = []
    first: set[bytes] = set()
    n = 0
    while not stop.is_set():
        for p in await c.pop(TOPIC, max_nums=16, invisible_ms=2_000, poll_ms=500):
            n += 1
            if p.attempt == 1 and p.body not in first and n % 2 == 0:
                first.add(p.body)
                continue
            if (await c.ack(TOPIC, p)).code == 0:  # (208: expired meanwhile on a loaded machine: back later)
                acked.append((p.body, p.attempt))
    return acked


async def test_ali_ons_push_consumer_and_pop_group_side_by_side(cluster: ClusterHandle) -> None:
    ns = cluster.namesrv_addr
    sent = (await node("produce", ns, TOPIC, str(COUNT)))["sent"]
    assert isinstance(sent, list) and len(sent) == COUNT
    stop = asyncio.Event()
    popper = asyncio.ensure_future(_pop_all(PopClient(cluster, GROUP_POP), stop))
    try:
        consumed = await node("consume", ns, TOPIC, GROUP_4X, str(COUNT), "0", "7000", "120000", deadline=160)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while cluster.broker.pop.in_flight() or loop.time() < deadline - 25:
            assert loop.time() < deadline, cluster.broker.pop.in_flight()
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        acked = await popper

    received = consumed["received"]
    assert isinstance(received, list)
    assert sorted(r["key"] for r in received) == sorted(f"key-{i}" for i in range(COUNT))
    assert {r["reconsumeTimes"] for r in received} == {0}  # nothing of the POP group's retries
    stats = await cluster.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP_4X, "topic": TOPIC})
    assert ConsumeStats.loads(stats.body).total_diff() == 0

    bodies = [b for b, _ in acked]
    assert sorted(bodies) == sorted(expected_body(i, COUNT) for i in range(COUNT))
    assert {a for _, a in acked} >= {1, 2}  # the expired first deliveries came back, attempt 2
    assert cluster.broker.store.get_max_offset(retry_topic(GROUP_POP), 0) > 0
