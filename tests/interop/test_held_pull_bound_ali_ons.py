"""ali-ons (npm) consuming more queues on one connection than `maxHeldPullsPerConnection` lets the broker
hold: the pulls past the bound are answered at once (PULL_NOT_FOUND, as a pull without the suspend flag),
ali-ons pulls those queues again, and every message is consumed once, from every queue."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from daemon.remoting.codes import ResponseCode
from store.names import retry_topic
from tests.support.ali_ons import node
from tests.support.broker import start_cluster, stop_cluster

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "OnsBounded"
GROUP = "CID_MQCTL_ONS_BOUNDED"
QUEUES = 8
BOUND = 4  # the consumer reads QUEUES + 1 (its retry topic's) on one connection
COUNT = 48


async def test_ali_ons_consumes_every_queue_past_the_held_pull_bound(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path, max_held_pulls_per_connection=BOUND)
    try:
        broker = cluster.broker
        broker.topics.create_system_like(TOPIC, QUEUES, 6)
        broker.topics.create_system_like(retry_topic(GROUP), 1, 6)  # (ali-ons learns routes at start)
        await broker.register_all()
        consuming = asyncio.create_task(
            node(
                "consume", cluster.namesrv_addr, TOPIC, GROUP, str(COUNT), "0", "6000", "120000", deadline=160
            )
        )
        hold = broker.hold
        deadline = time.monotonic() + 120  # (a liveness bound for a loaded machine)
        while not (hold.parked == BOUND and hold.refused_owner > 0):
            assert not consuming.done(), consuming.result()
            assert time.monotonic() < deadline, f"the consumer never met the bound: {hold.parked} held"
            await asyncio.sleep(0.05)
        for i in range(COUNT):
            sent = await cluster.send(TOPIC, f"body-{i}".encode(), queue_id=i % QUEUES, keys=f"key-{i}")
            assert sent.code == ResponseCode.SUCCESS
        consumed = await consuming
        assert hold.parked <= BOUND  # (never more on the consumer's connection)
    finally:
        await stop_cluster(cluster)
    received = consumed["received"]
    assert isinstance(received, list)
    assert sorted(r["key"] for r in received) == sorted(f"key-{i}" for i in range(COUNT))
