"""The official C++ client (PyPI `rocketmq==0.4.4`, in .venv-interop/) against our NameServer + broker:
a first send to a missing topic auto-creates it through TBW102, then 200 messages are push-consumed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.broker.bodies import ConsumeStats
from daemon.remoting.codes import RequestCode
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
