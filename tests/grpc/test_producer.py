"""The official 5.x Python Producer against the broker's gRPC front: what it sends is what is stored."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from daemon.grpc.convert import fifo_queue
from tests.support.grpc5 import create_topic, grpc_cluster, message, producer, stored, wait_for

pytestmark = pytest.mark.slow


def test_sync_and_async_sends_are_stored_with_the_5x_id_tag_and_keys(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Orders")
        with producer(cluster, ("Orders",)) as p:
            sync = p.send(message("Orders", b"sync body", tag="paid", keys="ord-1"))
            later = p.send_async(message("Orders", b"async body", tag="new")).result(10)
        messages = {m.uniq_key: m for m in stored(cluster, "Orders")}
        assert len(sync.message_id) == 34 and len(later.message_id) == 34
        first = messages[sync.message_id]
        assert (first.body, first.tags, first.keys) == (b"sync body", "paid", ["ord-1"])
        assert messages[later.message_id].body == b"async body"
        assert messages[later.message_id].tags == "new"


def test_a_topic_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with grpc_cluster(tmp_path, auto_create_topic_enable=False) as cluster:
        create_topic(cluster, "Known")
        with producer(cluster, ("Known",)) as p, pytest.raises(Exception, match="topic:Unknown route"):
            p.send(message("Unknown", b"x"))


def test_fifo_groups_keep_their_order_in_one_queue_each_across_four(tmp_path: Path) -> None:
    groups = [f"order-{i}" for i in range(6)]
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Fifo", queues=4)
        with producer(cluster, ("Fifo",)) as p:
            for n in range(10):
                for group in groups:
                    p.send(message("Fifo", f"{group}:{n}".encode(), message_group=group))
        by_group: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for m in stored(cluster, "Fifo"):
            group, n = m.body.decode().split(":")
            assert m.properties["__SHARDINGKEY"] == group
            by_group[group].append((m.queue_id, int(n)))
    used = set()
    for group, seen in by_group.items():
        queues = {q for q, _ in seen}
        assert queues == {fifo_queue(group, 4)}, group  # one queue per group, the proxy's choice
        assert [n for _, n in seen] == list(range(10)), group  # in send order
        used |= queues
    assert len(used) > 1  # the groups spread over the queues


@pytest.mark.parametrize("ahead", [5, 65])
def test_a_delay_message_is_delivered_at_its_time(tmp_path: Path, ahead: int) -> None:
    """5 s and 65 s ahead (whole seconds, as the client sends them; 65 s is past every 4.x delay level's
    rounding): not visible before, stored in its topic within 1 s after its time (the broker's store time)."""
    with grpc_cluster(tmp_path) as cluster:
        create_topic(cluster, "Later")
        with producer(cluster, ("Later",)) as p:
            due = int(time.time()) + ahead
            receipt = p.send(message("Later", b"later", delivery_timestamp=due))
        assert all(m.uniq_key != receipt.message_id for m in stored(cluster, "Later"))
        found = wait_for(
            lambda: [m for m in stored(cluster, "Later") if m.uniq_key == receipt.message_id],
            timeout=ahead + 15,
        )
    assert found[0].properties["TIMER_DELIVER_MS"] == str(due * 1000)
    late_ms = found[0].store_timestamp - due * 1000
    assert 0 <= late_ms < 1000, late_ms
