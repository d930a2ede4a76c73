"""ali-ons against a broker group whose master is gone: it keeps consuming from the slave the route
still lists (the slave replicated everything and synced the topics from its master)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from store.config import SLAVE
from store.names import retry_topic
from tests.support.ali_ons import expected_body, node
from tests.support.broker import replicated, start_broker, start_cluster, stop_cluster

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "OnsHaTopic"
GROUP = "CID_MQCTL_ONS_HA"
COUNT = 60


async def test_ali_ons_consumes_from_the_slave_with_the_master_down(tmp_path: Path) -> None:
    handle = await start_cluster(tmp_path, ha_listen_port=0)
    master = handle.broker
    slave = await start_broker(
        tmp_path / "slave", namesrv_addr=handle.namesrv_addr, broker_id=1, broker_role=SLAVE, ha_listen_port=0
    )
    try:
        master.topics.create_system_like(TOPIC, 4, 6)
        master.topics.create_system_like(retry_topic(GROUP), 1, 6)
        await master.register_all()
        sent = (await node("produce", handle.namesrv_addr, TOPIC, str(COUNT)))["sent"]
        assert isinstance(sent, list) and {s["status"] for s in sent} == {"SEND_OK"}
        await replicated(master, slave)
        await master.stop()  # unregistered: the route lists only the slave now

        consumed = await node(
            "consume", handle.namesrv_addr, TOPIC, GROUP, str(COUNT), "0", "1000", "90000", deadline=120
        )
        received = consumed["received"]
        assert isinstance(received, list)
        by_key = {r["key"]: r for r in received}
        assert len(by_key) == COUNT
        for i in range(COUNT):
            body = expected_body(i, COUNT)
            assert by_key[f"key-{i}"]["sha1"] == hashlib.sha1(body).hexdigest()
    finally:
        await slave.stop()
        await stop_cluster(handle)
