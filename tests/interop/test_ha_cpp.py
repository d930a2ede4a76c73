"""The official C++ client (PyPI `rocketmq==0.4.4`) against a broker group whose master is gone: what it
sent while the master was up, it push-consumes from the slave the route still lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.config import SLAVE
from tests.support.broker import replicated, start_broker, start_cluster, stop_cluster
from tests.support.cpp import cpp_roundtrip

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "CppHaTopic"
GROUP = "CID_MQCTL_CPP_HA"
COUNT = 60


async def test_cpp_client_consumes_from_the_slave_with_the_master_down(tmp_path: Path) -> None:
    handle = await start_cluster(tmp_path, ha_listen_port=0)
    master = handle.broker
    slave = await start_broker(
        tmp_path / "slave", namesrv_addr=handle.namesrv_addr, broker_id=1, broker_role=SLAVE, ha_listen_port=0
    )
    try:
        master.topics.create_system_like(TOPIC, 4, 6)
        await master.register_all()
        code, produced, err = await cpp_roundtrip(handle.namesrv_addr, TOPIC, GROUP, COUNT, 90, "produce")
        assert code == 0, err[-3000:]
        assert [s["status"] for s in produced["sent"]] == [0] * COUNT  # type: ignore[attr-defined]  # SEND_OK
        await replicated(master, slave)
        await master.stop()  # unregistered: the route lists only the slave now

        code, consumed, err = await cpp_roundtrip(handle.namesrv_addr, TOPIC, GROUP, COUNT, 90, "consume")
        assert code == 0, err[-3000:]
        received, expected = consumed["received"], consumed["expected"]
        assert isinstance(received, dict) and isinstance(expected, dict)
        assert sorted(received) == sorted(expected)
        for key, entry in received.items():
            assert entry["sha1"] == expected[key] and entry["n"] >= 1
    finally:
        await slave.stop()
        await stop_cluster(handle)
