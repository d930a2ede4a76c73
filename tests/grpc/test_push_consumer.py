"""The official 5.x PushConsumer (Settings from Telemetry, QueryAssignment, auto-renewed receives)."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.daemons import LocalCluster
from tests.support.grpc5 import (
    client_config,
    create_group,
    create_topic,
    grpc_cluster,
    message,
    producer,
    stored,
    wait_for,
)

pytestmark = pytest.mark.slow

from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer  # noqa: E402

COUNT = 1000


class Recorder(MessageListener):  # type: ignore[misc]
    """Remembers each consumed message (body, attempt) in consumption order."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, int]] = []
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.seen.append((message.body, message.delivery_attempt))
        return ConsumeResult.SUCCESS


@contextmanager
def push_consumer(cluster: LocalCluster, group: str, topic: str, listener: Recorder) -> Iterator[Any]:
    made = PushConsumer(client_config(cluster), group, listener, {topic: FilterExpression("*")})
    made.startup()
    try:
        yield made
    finally:
        made.shutdown()


def test_push_consumer_consumes_a_thousand_messages_concurrently(tmp_path: Path) -> None:
    """Every message is consumed; as RocketMQ promises at least once, not exactly once, a message is
    consumed twice only as a second stored copy (the client sends again after a send of its timed out
    on a busy host, and the broker had stored the first) or as a redelivery (a later attempt)."""
    listener = Recorder()
    sent = {f"e-{i}".encode() for i in range(COUNT)}
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Events", queues=4)
        with producer(cluster, ("Events",)) as p:
            bodies = sorted(sent)
            for start in range(0, COUNT, 100):  # 100 in flight: a flood of sends is not what this tests
                for f in [p.send_async(message("Events", body)) for body in bodies[start : start + 100]]:
                    f.result(30)
        with push_consumer(cluster, "Listeners", "Events", listener):
            wait_for(lambda: {body for body, _ in listener.seen} >= sent, timeout=60)
            assert wait_for(lambda: cluster.broker.pop.in_flight().get("Listeners", 0) == 0, timeout=20)
        copies = Counter(m.body for m in stored(cluster, "Events"))
    assert set(copies) == sent
    consumed = Counter(body for body, _ in listener.seen)
    assert set(consumed) == sent
    redelivered = Counter(body for body, attempt in listener.seen if attempt > 1)
    extra = {b: n for b, n in consumed.items() if n > copies[b] + redelivered[b]}
    assert not extra, f"consumed more often than stored or redelivered: {sorted(extra.items())[:5]}"


def test_push_consumer_of_an_orderly_group_consumes_each_message_group_in_order(tmp_path: Path) -> None:
    listener = Recorder()
    groups = [f"g{i}" for i in range(10)]
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Steps", queues=4)
        create_group(cluster, "Ordered", orderly=True)
        with producer(cluster, ("Steps",)) as p:
            for n in range(COUNT // len(groups)):
                for g in groups:
                    p.send(message("Steps", f"{g}:{n}".encode(), message_group=g))
        with push_consumer(cluster, "Ordered", "Steps", listener) as consumer:
            assert consumer.fifo  # the Settings reply said so
            wait_for(lambda: len(listener.seen) >= COUNT, timeout=90)
    order: dict[str, list[int]] = defaultdict(list)
    for body, _ in listener.seen:
        g, n = body.decode().split(":")
        order[g].append(int(n))
    bad = {
        g: [(a, b) for a, b in zip(order[g], order[g][1:], strict=False) if b != a + 1]
        for g in groups
        if order[g] != list(range(COUNT // len(groups)))
    }
    assert not bad, bad


class Slow(Recorder):
    """Takes `seconds` over the first message it is given, then is quick."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def consume(self, message: Any) -> Any:
        if not self.seen:
            time.sleep(self.seconds)
        return super().consume(message)


def test_a_slow_listener_keeps_its_message_the_broker_renews_the_lending(tmp_path: Path) -> None:
    listener = Slow(4.0)
    with grpc_cluster(tmp_path) as cluster:
        front = cluster.broker.grpc
        assert front is not None and front.service is not None
        front.service.leases.invisible_ms, front.service.leases.ahead_ms = 2_000, 1_200  # lent for 2 s
        create_topic(cluster, "Slow", queues=1)
        create_topic(cluster, "%RETRY%Patient", queues=1)  # a lapsed lending would come back at once
        with producer(cluster, ("Slow",)) as p:
            p.send(message("Slow", b"take your time"))
        with push_consumer(cluster, "Patient", "Slow", listener):
            wait_for(lambda: listener.seen, timeout=30)
            wait_for(lambda: cluster.broker.pop.in_flight().get("Patient", 0) == 0, timeout=10)
            time.sleep(3)  # a message lent and not renewed would be back by now
    assert listener.seen == [(b"take your time", 1)]  # consumed once, on its first delivery
