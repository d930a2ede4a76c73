"""The official C++ client (PyPI `rocketmq==0.4.4`) sends timer messages by setting 5.x's `TIMER_DELAY_MS`
property: our broker parks them, then its push consumer gets each once, within a second of its time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from store.names import TIMER_TOPIC
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster
from tests.support.cpp import cpp_roundtrip

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "CppTimerTopic"
GROUP = "CID_MQCTL_CPP_TIMER"
COUNT = 20


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterHandle]:
    handle = await start_cluster(tmp_path)
    try:
        yield handle
    finally:
        await stop_cluster(handle)


async def test_cpp_client_timer_messages_are_held_then_consumed_once(cluster: ClusterHandle) -> None:
    env = {"CPP_TIMER_DELAY_MS": "3000"}
    code, result, err = await cpp_roundtrip(cluster.namesrv_addr, TOPIC, GROUP, COUNT, 60, "produce", env)
    assert code == 0, err[-3000:]
    assert [s["status"] for s in result["sent"]] == [0] * COUNT  # SEND_OK
    store = cluster.broker.store
    assert store.get_max_offset(TIMER_TOPIC, 0) == COUNT  # each parked first
    code, result, err = await cpp_roundtrip(cluster.namesrv_addr, TOPIC, GROUP, COUNT, 60, "consume")
    assert code == 0, err[-3000:]
    received = result["received"]
    assert sorted(received) == sorted(result["expected"])
    assert all(entry["n"] == 1 for entry in received.values())
    for q in range(4):
        for selected in store.get_messages(GROUP, TOPIC, q, 0, 32).messages:
            msg = selected.message
            assert 0 <= msg.store_timestamp - int(msg.properties["TIMER_OUT_MS"]) < 1000
            assert msg.store_timestamp - msg.born_timestamp >= 2900
