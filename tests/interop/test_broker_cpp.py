"""The official C++ client (PyPI `rocketmq==0.4.4`, in .venv-interop/) against our NameServer + broker:
a first send to a missing topic auto-creates it through TBW102, then 200 messages are push-consumed; timer
messages it sends by setting 5.x's `TIMER_DELAY_MS` property are held, then consumed once each within a
second of their time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.broker.bodies import ConsumeStats
from daemon.remoting.codes import RequestCode
from store.names import TIMER_TOPIC
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster
from tests.support.cpp import cpp_roundtrip

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "CppAutoTopic"
GROUP = "CID_MQCTL_CPP"
COUNT = 200


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterHandle]:
    handle = await start_cluster(tmp_path)
    try:
        yield handle
    finally:
        await stop_cluster(handle)


async def test_cpp_client_auto_creates_topic_then_produces_and_consumes(cluster: ClusterHandle) -> None:
    assert cluster.broker.topics.get(TOPIC) is None
    code, result, err = await cpp_roundtrip(cluster.namesrv_addr, TOPIC, GROUP, COUNT, 90)
    assert code == 0, err[-3000:]
    assert [s["status"] for s in result["sent"]] == [0] * COUNT  # SEND_OK
    config = cluster.broker.topics.get(TOPIC)
    assert config is not None and config.write_queue_nums == 4  # created from TBW102 with the client's 4
    received = result["received"]
    assert sorted(received) == sorted(result["expected"])
    for key, entry in received.items():
        assert entry["sha1"] == result["expected"][key] and entry["n"] == 1
        assert entry["tags"] == f"Tag{int(key.split('-')[1]) % 2}"
    stats = await cluster.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC})
    assert ConsumeStats.loads(stats.body).total_diff() == 0


TIMED_TOPIC = "CppTimerTopic"
TIMED_GROUP = "CID_MQCTL_CPP_TIMER"
TIMED_COUNT = 20


async def test_cpp_client_timer_messages_are_held_then_consumed_once(cluster: ClusterHandle) -> None:
    env = {"CPP_TIMER_DELAY_MS": "3000"}
    code, result, err = await cpp_roundtrip(
        cluster.namesrv_addr, TIMED_TOPIC, TIMED_GROUP, TIMED_COUNT, 60, "produce", env
    )
    assert code == 0, err[-3000:]
    assert [s["status"] for s in result["sent"]] == [0] * TIMED_COUNT  # SEND_OK
    store = cluster.broker.store
    assert store.get_max_offset(TIMER_TOPIC, 0) == TIMED_COUNT  # each parked first
    code, result, err = await cpp_roundtrip(
        cluster.namesrv_addr, TIMED_TOPIC, TIMED_GROUP, TIMED_COUNT, 60, "consume"
    )
    assert code == 0, err[-3000:]
    received = result["received"]
    assert sorted(received) == sorted(result["expected"])
    assert all(entry["n"] == 1 for entry in received.values())
    for q in range(4):
        for selected in store.get_messages(TIMED_GROUP, TIMED_TOPIC, q, 0, 32).messages:
            msg = selected.message
            assert 0 <= msg.store_timestamp - int(msg.properties["TIMER_OUT_MS"]) < 1000
            assert msg.store_timestamp - msg.born_timestamp >= 2900
