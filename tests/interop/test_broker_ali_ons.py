"""ali-ons (npm, installed by scripts/install-interop-clients.sh) producing to and consuming from
our real NameServer + broker: tags, keys, deflated bodies, retries through %RETRY%, committed offsets.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.broker.bodies import ConsumeStats
from daemon.remoting.codes import RequestCode
from store.engine import DefaultMessageStore
from store.names import retry_topic
from tests.support.ali_ons import expected_body, node
from tests.support.bounded import run_bounded
from tests.support.broker import ClusterHandle, start_cluster, stop_cluster
from tests.support.paths import ROOT

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "OnsTopic"
GROUP = "CID_MQCTL_ONS"
COUNT = 200


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterHandle]:
    handle = await start_cluster(tmp_path)  # default delay levels: retries come back after 10 s
    broker = handle.broker
    broker.topics.create_system_like(TOPIC, 4, 6)
    # ali-ons only learns a route at start and every 30 s: give %RETRY%<group> one before it starts
    broker.topics.create_system_like(retry_topic(GROUP), 1, 6)
    await broker.register_all()
    try:
        yield handle
    finally:
        await stop_cluster(handle)


async def test_ali_ons_roundtrip_with_retries_and_committed_offsets(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    ns = cluster.namesrv_addr
    sent = (await node("produce", ns, TOPIC, str(COUNT)))["sent"]
    assert isinstance(sent, list) and len(sent) == COUNT
    assert {s["status"] for s in sent} == {"SEND_OK"}

    consumed = await node("consume", ns, TOPIC, GROUP, str(COUNT), "1", "7000", "120000", deadline=160)
    received = consumed["received"]
    assert isinstance(received, list)
    assert consumed["failures"] == COUNT
    by_key = {r["key"]: r for r in received}
    assert len(received) == COUNT and len(by_key) == COUNT  # each exactly once after its retry
    for i in range(COUNT):
        r = by_key[f"key-{i}"]
        body = expected_body(i, COUNT)
        assert (r["len"], r["sha1"]) == (len(body), hashlib.sha1(body).hexdigest())
        assert r["tags"] == f"Tag{i % 3}" and r["keys"] == f"key-{i} alt-{i}"
        assert r["reconsumeTimes"] == 1

    again = await node("consume", ns, TOPIC, GROUP, "0", "0", "8000", "0", deadline=40)
    assert again["received"] == []

    stats = await cluster.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC})
    assert ConsumeStats.loads(stats.body).total_diff() == 0

    # our own store tools read what the broker wrote, after a clean stop
    await cluster.broker.stop()
    root = cluster.broker.config.store_path_root_dir
    with DefaultMessageStore(cluster.broker.config.store_config(), read_only=True) as store:
        total = sum(store.get_max_offset(TOPIC, q) for q in range(4))
        assert total == COUNT
        got = store.get_messages("", TOPIC, int(sent[0]["queueId"]), int(sent[0]["queueOffset"]), 1)
        assert got.messages, (sent[0], got)
        first = got.messages[0].message
        assert first.keys == ["key-0", "alt-0"] and first.body == expected_body(0, COUNT)
        offsets = store.configs.consumer_offsets
        assert sum(offsets.offsets_of(GROUP, TOPIC).values()) == COUNT
    argv = [sys.executable, "-m", "mqctl", "store", "verify", "--store", root, "-o", "json"]
    verify = await run_bounded(argv, deadline=30, what="mqctl store verify", cwd=ROOT)
    assert verify.returncode == 0, (verify.stdout[-2000:], verify.stderr[-2000:])
